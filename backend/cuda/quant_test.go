package cuda

import (
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/backend/cuda/internal/emu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// Tolerances of the emulated device on Q8_0 / Q4_K weights, relative to max |logit|. Against
// the CPU backend on the same weights dequantized to float32 (the values the kernels compute
// with) both multiply float32 activations, so only the order of float32 sums differs, and with
// it now and then one bf16 rounding of a cached K/V element (dequantTol: 7e-4 measured on pico).
// Against the CPU backend on the blocks themselves, which quantizes the activations to 8 bits
// per block first as llama.cpp does (up to 1/254 of a block's largest element each), the rows
// differ by that quantization's error too (quantTol: 4% measured on pico with Q4_K).
const (
	dequantTol = 2e-3
	quantTol   = 6e-2
)

// quantized holds models/pico quantized to each type once per test binary (Q4_K's reference
// quantizer takes over a second for it).
var quantized struct {
	sync.Mutex // guards m
	m          map[quant.Type]*model.Model
}

// quantizedPico is models/pico with every matrix in qt (llama.cpp's reference quantizers): a
// shallow copy of the cached model, whose matrices the caller may replace but not write into.
func quantizedPico(t testing.TB, qt quant.Type) *model.Model {
	t.Helper()
	quantized.Lock()
	defer quantized.Unlock()
	m, ok := quantized.m[qt]
	if !ok {
		m = backendtest.Pico(t)
		if err := model.Quantize(m, qt); err != nil {
			t.Fatal(err)
		}
		if quantized.m == nil {
			quantized.m = map[quant.Type]*model.Model{}
		}
		quantized.m[qt] = m
	}
	c := *m
	c.Layers = slices.Clone(m.Layers)
	return &c
}

// TestQuantizedMatchesCPU runs pico quantized to Q8_0 and to Q4_K on the emulated device and on
// GPU 0 where one opens with the kernels (the blocks uploaded as stored: embed_q, gemv_q8_0 /
// gemv_q4_k for decode rows, gemm_q for prefill rows) and on the CPU backend twice, over the weights dequantized to float32 and over the
// blocks themselves, the same batches in lockstep (prompts whole and in chunks, joining while
// others decode): every logits row within dequantTol / quantTol of max |logit|, and the greedy
// picks equal to the dequantized run's wherever its top-2 gap is clear of the tolerance.
func TestQuantizedMatchesCPU(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) { quantizedMatchesCPU(t, dv) })
}

func quantizedMatchesCPU(t *testing.T, dv device) {
	for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		t.Run(qt.String(), func(t *testing.T) {
			m := quantizedPico(t, qt)
			deq := quantizedPico(t, qt) // the same weights widened exactly to float32
			if err := model.Quantize(deq, quant.F32); err != nil {
				t.Fatal(err)
			}
			var cpus []backend.Backend
			for _, cm := range []*model.Model{deq, m} {
				c, err := cpu.New(cm, backend.Options{NumBlocks: 96, KVCacheDType: backend.KVBF16, Tuning: cpu.Tuning{Threads: 1}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				cpus = append(cpus, c)
			}
			g := openOn(t, dv, m, backend.Options{NumBlocks: 96, KVCacheDType: backend.KVBF16}, Tuning{})
			for name, mat := range map[string]matrix{"embed": g.w.embed, "lm_head": g.w.lmHead, "qkv": g.w.layers[0].qkv, "down": g.w.layers[5].down} {
				if mat.q != qt || mat.f32 {
					t.Fatalf("%s uploaded as q=%v f32=%v, want %v blocks", name, mat.q, mat.f32, qt)
				}
			}
			vocab := m.Config.VocabSize
			prompt := func(n int, seed int32) []int32 {
				p := make([]int32, n)
				for i := range p {
					p[i] = 1 + (seed*7919+int32(i)*104729)%int32(vocab-1)
				}
				return p
			}
			seqs := []*seqRun{
				{prompt: prompt(23, 1), steps: 8},
				{prompt: prompt(40, 2), chunk: 9, steps: 5, start: 1},
				{prompt: prompt(3, 3), steps: 10, start: 2},
			}
			if testing.Short() {
				seqs = seqs[:2]
			}
			for _, s := range seqs {
				s.tokens = slices.Clone(s.prompt)
			}
			rows := drive(t, []backend.Backend{g, cpus[0], cpus[1]}, seqs, 96)
			n, ties := 0, 0
			worst := [2]float64{}
			for i := range seqs {
				if len(rows[0][i]) != len(rows[1][i]) || len(rows[0][i]) < seqs[i].steps {
					t.Fatalf("seq %d: %d rows on the device, %d on the CPU", i, len(rows[0][i]), len(rows[1][i]))
				}
				for j := range rows[0][i] {
					gr := rows[0][i][j]
					for k, tol := range []float64{dequantTol, quantTol} {
						d := backendtest.RelDiff(t, gr, rows[1+k][i][j])
						worst[k] = max(worst[k], d)
						if d > tol {
							t.Errorf("seq %d row %d: emulated CUDA and CPU (%s) differ by %.3g of max |logit|", i, j, []string{"dequantized", "blocks"}[k], d)
						}
					}
					cr := rows[1][i][j]
					if gap, scale := top2Gap(cr); gap > 2*dequantTol*scale {
						if ga, ca := backendtest.Argmax(gr), backendtest.Argmax(cr); ga != ca {
							t.Errorf("seq %d row %d: greedy %d on the device, %d on the CPU (top-2 gap %.3g)", i, j, ga, ca, gap)
						}
					} else {
						ties++
					}
					n++
				}
			}
			t.Logf("%s: %d rows, max rel diff %.3g (dequantized), %.3g (blocks); %d near-ties not compared by id", qt, n, worst[0], worst[1], ties)
			if ties > n/4 {
				t.Fatalf("%d of %d rows are near-ties: the greedy check compared too little", ties, n)
			}
		})
	}
}

// top2Gap is the gap between a row's two largest logits, and its max |logit|.
func top2Gap(x []float32) (gap, scale float64) {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		f := float64(v)
		scale = max(scale, math.Abs(f))
		if f > a {
			a, b = f, a
		} else if f > b {
			b = f
		}
	}
	return a - b, scale
}

// TestQuantizedBatchInvariance: with quantized weights a sequence's rows are bitwise the same
// alone and in steps shared with prefill chunks and other decodes (decode rows always run the
// decode GEMMs, prefill rows the tiled ones, whatever the step holds), eagerly and with graphs.
func TestQuantizedBatchInvariance(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) { quantizedBatchInvariance(t, dv) })
}

func quantizedBatchInvariance(t *testing.T, dv device) {
	m := quantizedPico(t, quant.Q4_K)
	vocab := int32(m.Config.VocabSize)
	mk := func(n int, seed int32, chunk, steps, start int) *seqRun {
		p := make([]int32, n)
		for i := range p {
			p[i] = 1 + (seed*31+int32(i)*977)%(vocab-1)
		}
		return &seqRun{prompt: p, chunk: chunk, steps: steps, start: start, tokens: slices.Clone(p)}
	}
	for _, tune := range []Tuning{{NoGraphs: true}, {}} {
		alone := drive(t, []backend.Backend{openOn(t, dv, m, backend.Options{NumBlocks: 64}, tune)}, []*seqRun{mk(13, 1, 0, 6, 0)}, 64)[0][0]
		seqs := []*seqRun{mk(30, 2, 8, 2, 0), mk(13, 1, 0, 6, 0), mk(2, 3, 0, 7, 1), mk(20, 4, 0, 1, 3)}
		rows := drive(t, []backend.Backend{openOn(t, dv, m, backend.Options{NumBlocks: 64}, tune)}, seqs, 64)[0][1]
		if len(rows) != len(alone) {
			t.Fatalf("%d rows in the batch, %d alone", len(rows), len(alone))
		}
		for i := range alone {
			for j := range alone[i] {
				if math.Float32bits(rows[i][j]) != math.Float32bits(alone[i][j]) {
					t.Fatalf("graphs=%v row %d: logit %d is %v in the batch, %v alone", !tune.NoGraphs, i, j, rows[i][j], alone[i][j])
				}
			}
		}
	}
}

// TestQuantizedGGUF: pico quantized to Q4_K, written as a GGUF and loaded back (llama.cpp's
// layout: separate q, k and v tensors fused at load into row parts), runs on the emulated device
// with its blocks kept, and its logits equal the in-memory quantized model's bit for bit.
func TestQuantizedGGUF(t *testing.T) {
	m := quantizedPico(t, quant.Q4_K)
	w, err := m.GGUFWriter()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pico-q4_k.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	g, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [2][][]float32
	for i, mm := range []*model.Model{m, g} {
		b := emulated(t, mm, backend.Options{NumBlocks: 16}, Tuning{})
		if q := b.w.layers[0].qkv.q; q != quant.Q4_K {
			t.Fatalf("model %d: qkv uploaded as %v, want q4_k blocks", i, q)
		}
		s := &seqRun{prompt: []int32{5, 900, 31, 7000, 2}, steps: 3}
		s.tokens = slices.Clone(s.prompt)
		rows[i] = drive(t, []backend.Backend{b}, []*seqRun{s}, 16)[0][0]
	}
	if len(rows[0]) != 3 || len(rows[1]) != 3 {
		t.Fatalf("%d and %d rows", len(rows[0]), len(rows[1]))
	}
	for i := range rows[0] {
		if !slices.Equal(rows[0][i], rows[1][i]) {
			t.Fatalf("row %d: the GGUF's logits differ from the in-memory model's (max rel diff %.3g)", i, backendtest.RelDiff(t, rows[1][i], rows[0][i]))
		}
	}
}

// TestFilledWeightsDecode: the decode benchmark's weights made on the device (bf16, and Q8_0 /
// Q4_K blocks of random bytes) run a decode step on the emulator with finite logits, so a GPU
// run of BenchmarkDecode does not spend its time on a broken setup.
func TestFilledWeightsDecode(t *testing.T) {
	cfg := backendtest.Pico(t).Config
	for _, qt := range []quant.Type{quant.BF16, quant.Q8_0, quant.Q4_K} {
		t.Run(qt.String(), func(t *testing.T) {
			d := emu.New(1 << 30)
			b, err := newBackendWith(d, cfg, backend.Options{NumBlocks: 8}, Tuning{Emulate: true},
				func(allocs *[]dev.Ptr) (*weights, error) { return fillWeights(d, cfg, qt, allocs) })
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			want := qt
			if qt == quant.BF16 {
				want = 0 // bf16 matrices carry no block type
			}
			if b.w.layers[0].gateUp.q != want || b.w.embed.q != want {
				t.Fatalf("filled matrices are of type %v / %v, want %v", b.w.layers[0].gateUp.q, b.w.embed.q, want)
			}
			decodeTwoFinite(t, b)
		})
	}
}
