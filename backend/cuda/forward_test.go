package cuda

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/backendtest"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/backend/cuda/internal/cu"
	"github.com/llmserve/llmserve/model"
)

// reference is testdata/models/*/expected.json, made by transformers in float32.
type reference struct {
	Prompts []struct {
		InputIDs     []int32   `json:"input_ids"`
		FirstLogits  []float32 `json:"first_logits"`
		LastLogits   []float32 `json:"last_logits"`
		GreedyNewIDs []int32   `json:"greedy_new_ids"`
		MinTop2Gap   float64   `json:"min_top2_gap"`
	} `json:"prompts"`
}

const fixtureDir = "../../testdata/models"

var fixtureModels = []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"}

func loadFixture(t testing.TB, name string) (*model.Model, reference) {
	t.Helper()
	m, err := model.Load(filepath.Join(fixtureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(fixtureDir, name, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	return m, ref
}

// device is where an end-to-end test runs: the emulator, or GPU 0.
type device struct {
	name string
	gpu  bool
}

var (
	gpuProbe     sync.Once
	gpuAvailable bool
	// gpuErr is why GPU 0 did not open.
	gpuErr error
)

// forDevices runs fn on the emulator, and on GPU 0 where one opens with the kernels.
func forDevices(t *testing.T, fn func(t *testing.T, dv device)) {
	gpuProbe.Do(func() {
		d, err := openDriver(0)
		if err == nil {
			gpuAvailable = true
			_ = d.Close()
		}
		gpuErr = err
	})
	// check.sh sets LLMSERVE_CUDA_GPU_ONLY: CI has run the emulated half already, and GPU time
	// is scarce
	gpuOnly := os.Getenv("LLMSERVE_CUDA_GPU_ONLY") == "1"
	if !gpuOnly {
		t.Run("emu", func(t *testing.T) { fn(t, device{name: "emu"}) })
	}
	switch {
	case gpuAvailable:
		t.Run("gpu", func(t *testing.T) { fn(t, device{name: "gpu", gpu: true}) })
	case requireGPU || gpuOnly:
		noGPU(t, gpuErr) // nothing ran: a skip (or, required, a failure), never a silent pass
	}
}

// emulated opens the CUDA backend on the emulator.
func emulated(t testing.TB, m *model.Model, opts backend.Options, tune Tuning) *Backend {
	t.Helper()
	return openOn(t, device{name: "emu"}, m, opts, tune)
}

// openOn opens the CUDA backend on dv.
func openOn(t testing.TB, dv device, m *model.Model, opts backend.Options, tune Tuning) *Backend {
	t.Helper()
	tune.Emulate = !dv.gpu
	opts.Tuning = tune
	b, err := New(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// seqRun is one sequence driven through chunked prefill and greedy decoding.
type seqRun struct {
	prompt []int32
	// chunk is the prefill chunk length (0: the whole prompt), steps the greedy tokens to
	// generate, start the step at which the sequence joins.
	chunk, steps, start int
	// fed counts the tokens whose K/V are cached; tokens is the prompt and what was generated.
	fed       int
	tokens    []int32
	table     []int32
	generated []int32
}

// drive runs all sequences to completion on each backend in lockstep, with the same batches
// (the first backend's greedy picks feed every backend, so they see the same tokens), and
// returns each backend's logits rows per sequence.
func drive(t *testing.T, bs []backend.Backend, seqs []*seqRun, blocks int) [][][][]float32 {
	t.Helper()
	free := rand.New(rand.NewPCG(7, 1)).Perm(blocks)
	rows := make([][][][]float32, len(bs))
	for i := range rows {
		rows[i] = make([][][]float32, len(seqs))
	}
	for step := 0; ; step++ {
		var batch backend.Batch
		var active []int
		done := true
		for i, s := range seqs {
			if len(s.generated) >= s.steps && s.fed >= len(s.prompt) {
				continue
			}
			done = false
			if step < s.start {
				continue
			}
			var toks []int32
			if s.fed < len(s.prompt) {
				n := len(s.prompt) - s.fed
				if s.chunk > 0 {
					n = min(n, s.chunk)
				}
				toks = s.tokens[s.fed : s.fed+n]
			} else {
				toks = s.tokens[s.fed : s.fed+1]
			}
			for len(s.table)*16 < s.fed+len(toks) {
				s.table = append(s.table, int32(free[0]))
				free = free[1:]
			}
			batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: toks, Pos: s.fed, BlockTable: s.table, Logits: s.fed+len(toks) >= len(s.prompt)})
			active = append(active, i)
		}
		if done {
			return rows
		}
		if len(active) == 0 {
			continue
		}
		var first [][]float32
		for k, b := range bs {
			out, err := b.Forward(context.Background(), &batch)
			if err != nil {
				t.Fatal(err)
			}
			for j, i := range active {
				if out[j] != nil {
					rows[k][i] = append(rows[k][i], slices.Clone(out[j]))
				} else if batch.Seqs[j].Logits {
					t.Fatalf("backend %d: seq %d asked for logits and got none", k, i)
				}
			}
			if k == 0 {
				first = out
			}
		}
		for j, i := range active {
			s := seqs[i]
			s.fed += len(batch.Seqs[j].Tokens)
			if batch.Seqs[j].Logits && len(s.generated) < s.steps {
				next := backendtest.Argmax(first[j])
				s.generated = append(s.generated, next)
				s.tokens = append(s.tokens, next)
			}
		}
	}
}

// bf16Tol bounds the emulated backend against transformers' float32 logits, as the CPU
// backend's tests bound its bf16 paths: weights, activations and the KV cache are all rounded to
// bf16 (8 significant bits), and the fixtures' tiny random layers (hidden size 64) average few
// terms, so the error is larger than the 1e-2 a real checkpoint's GPU run is held to.
const bf16Tol = 4e-2

// runTol bounds two bf16 runs of the same rows that sum in different orders (this backend and
// the CPU's): a float32 ulp upstream flips an activation's or a cached element's bf16 rounding
// by one bf16 ulp (2^-8 ≈ 3.9e-3) of the logits' scale; allow two such flips.
const runTol = 8e-3

// TestForwardMatchesReference runs every fixture on the emulated device, prompts in chunks and
// batched with each other, and compares the logits with transformers' float32 reference
// (float32 checkpoints within 1e-4 of max |logit|, the bf16 one within bf16Tol), greedy ids
// equal where the top-2 gap is clear.
func TestForwardMatchesReference(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		for _, name := range fixtureModels {
			t.Run(name, func(t *testing.T) {
				m, ref := loadFixture(t, name)
				b := openOn(t, dv, m, backend.Options{NumBlocks: 96}, Tuning{})
				var seqs []*seqRun
				for i, p := range ref.Prompts {
					seqs = append(seqs, &seqRun{prompt: p.InputIDs, chunk: []int{0, 5, 64, 0}[i%4], steps: len(p.GreedyNewIDs), start: i, tokens: slices.Clone(p.InputIDs)})
				}
				rows := drive(t, []backend.Backend{b}, seqs, 96)[0]
				for i, p := range ref.Prompts {
					tol := bf16Tol
					if name != "qwen3-bf16" {
						tol = 1e-4 // float32 checkpoints run in f32 (weights, activations, KV cache)
					}
					if d := backendtest.RelDiff(t, rows[i][0], p.LastLogits); d > tol {
						t.Errorf("prompt %d: last prompt logits differ from transformers by %.3g of max |logit|", i, d)
					}
					if p.MinTop2Gap > 0.05 && !slices.Equal(seqs[i].generated, p.GreedyNewIDs) {
						t.Errorf("prompt %d: greedy ids %v, transformers %v (min top-2 gap %.3g)", i, seqs[i].generated, p.GreedyNewIDs, p.MinTop2Gap)
					}
				}
			})
		}
	})
}

// TestForwardMatchesCPU runs the same batches on the emulated device and the CPU backend with
// bf16 activations and a bf16 KV cache over a bf16 checkpoint: both round the same operands, so
// only the order of float32 sums differs.
func TestForwardMatchesCPU(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		m, ref := loadFixture(t, "qwen3-bf16")
		opts := backend.Options{NumBlocks: 96, KVCacheDType: backend.KVBF16}
		c, err := cpu.New(m, backend.Options{NumBlocks: 96, KVCacheDType: backend.KVBF16, Tuning: cpu.Tuning{Threads: 1, BF16Activations: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g := openOn(t, dv, m, opts, Tuning{})
		var seqs []*seqRun
		for i, p := range ref.Prompts {
			seqs = append(seqs, &seqRun{prompt: p.InputIDs, chunk: []int{0, 3, 16, 50}[i%4], steps: 8, start: 2 * i, tokens: slices.Clone(p.InputIDs)})
		}
		rows := drive(t, []backend.Backend{g, c}, seqs, 96)
		n := 0
		for i := range seqs {
			for j := range rows[0][i] {
				if d := backendtest.RelDiff(t, rows[0][i][j], rows[1][i][j]); d > runTol {
					t.Errorf("seq %d row %d: emulated CUDA and CPU differ by %.3g", i, j, d)
				}
				n++
			}
		}
		if n < 30 {
			t.Fatalf("compared only %d rows", n)
		}
	})
}

// randomModel is a small Qwen3-shaped model with random bf16 weights and a context long enough
// for several split-KV partitions.
func randomModel(t testing.TB) *model.Model {
	t.Helper()
	m, ref := loadFixture(t, "qwen3-bf16")
	_ = ref
	cfg := m.Config
	cfg.MaxPositions = 2048
	r, err := model.NewRandom(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLongContextPartitions: decode rows past 510 and 1,030 positions (several split-KV
// partitions of dev.PartitionTokens merged) match the CPU backend, as does the prefill that filled their cache.
func TestLongContextPartitions(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		if testing.Short() {
			t.Skip("long contexts on the emulator take a few seconds")
		}
		m := randomModel(t)
		rng := rand.New(rand.NewPCG(3, 3))
		prompt := func(n int) []int32 {
			p := make([]int32, n)
			for i := range p {
				p[i] = int32(rng.IntN(m.Config.VocabSize))
			}
			return p
		}
		c, err := cpu.New(m, backend.Options{NumBlocks: 200, KVCacheDType: backend.KVBF16, Tuning: cpu.Tuning{Threads: 1, BF16Activations: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		g := openOn(t, dv, m, backend.Options{NumBlocks: 200}, Tuning{})
		seqs := []*seqRun{
			{prompt: prompt(1030), chunk: 300, steps: 3},
			{prompt: prompt(510), chunk: 0, steps: 5, start: 1},
		}
		for _, s := range seqs {
			s.tokens = slices.Clone(s.prompt)
		}
		rows := drive(t, []backend.Backend{g, c}, seqs, 200)
		for i := range seqs {
			for j := range rows[0][i] {
				if d := backendtest.RelDiff(t, rows[0][i][j], rows[1][i][j]); d > runTol {
					t.Errorf("seq %d row %d: emulated CUDA and CPU differ by %.3g", i, j, d)
				}
			}
		}
	})
}

// TestBatchInvariance: a sequence's decode rows are bitwise the same alone, in a batch of
// seven, with graphs (padded to a bucket) or eagerly.
func TestBatchInvariance(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		m, ref := loadFixture(t, "qwen3-bf16")
		prompt := ref.Prompts[2].InputIDs
		// sequence s's prompt drops its last s%8 tokens, so lengths (and decode positions) differ
		cut := func(s int) int { return len(prompt) - s%8 }
		run := func(tune Tuning, others int) [][]float32 {
			b := openOn(t, dv, m, backend.Options{NumBlocks: 4 * 40}, tune)
			table := func(s int) []int32 { return []int32{int32(4 * s), int32(4*s + 1), int32(4*s + 2), int32(4*s + 3)} }
			var batch backend.Batch
			for s := range others + 1 {
				batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: prompt[:cut(s)], BlockTable: table(s), Logits: true})
			}
			out, err := b.Forward(context.Background(), &batch)
			if err != nil {
				t.Fatal(err)
			}
			var rows [][]float32
			tok := backendtest.Argmax(out[0])
			for step := range 4 {
				batch.Seqs = batch.Seqs[:0]
				for s := range others + 1 {
					batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: []int32{tok}, Pos: cut(s) + step, BlockTable: table(s), Logits: true})
				}
				out, err := b.Forward(context.Background(), &batch)
				if err != nil {
					t.Fatal(err)
				}
				rows = append(rows, slices.Clone(out[0]))
				tok = backendtest.Argmax(out[0])
			}
			if want := map[bool]int{true: 0, false: 1}[tune.NoGraphs]; len(b.graphs) != want {
				t.Fatalf("%d graphs captured, want %d", len(b.graphs), want)
			}
			return rows
		}
		alone := run(Tuning{NoGraphs: true}, 0)
		// batches of 37 pass one 16-row group of the decode GEMMs, and bucket 40 pads 3 rows
		for _, c := range []struct {
			name   string
			tune   Tuning
			others int
		}{{"eager batch of 7", Tuning{NoGraphs: true}, 6}, {"graph alone", Tuning{}, 0}, {"graph batch of 7 (bucket 8)", Tuning{}, 6},
			{"eager batch of 37", Tuning{NoGraphs: true}, 36}, {"graph batch of 37 (bucket 40)", Tuning{}, 36}} {
			got := run(c.tune, c.others)
			for i := range alone {
				if !slices.Equal(got[i], alone[i]) {
					t.Errorf("%s: decode step %d differs from the sequence alone (max rel diff %.3g)", c.name, i, backendtest.RelDiff(t, got[i], alone[i]))
				}
			}
		}
	})
}

// TestAllLogits: every position's row of an AllLogits chunk equals the last row of a forward
// over that prefix alone.
func TestAllLogits(t *testing.T) {
	forDevices(t, func(t *testing.T, dv device) {
		m, ref := loadFixture(t, "qwen3")
		b := openOn(t, dv, m, backend.Options{NumBlocks: 64}, Tuning{})
		prompt := ref.Prompts[2].InputIDs
		v := b.VocabSize()
		out, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
			{Tokens: prompt, BlockTable: []int32{0, 1, 2}, AllLogits: true, Logits: true},
			{Tokens: prompt[:5], BlockTable: []int32{9}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out[0]) != len(prompt)*v || out[1] != nil {
			t.Fatalf("rows of %d floats and %v", len(out[0]), out[1] != nil)
		}
		all := slices.Clone(out[0])
		for _, j := range []int{0, 7, len(prompt) - 1} {
			out, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[:j+1], BlockTable: []int32{4, 5, 6}, Logits: true}}})
			if err != nil {
				t.Fatal(err)
			}
			if d := backendtest.RelDiff(t, all[j*v:(j+1)*v], out[0]); d > 1e-5 {
				t.Errorf("position %d differs from its prefix's forward by %.3g", j, d)
			}
		}
	})
}

func TestRegistryAndErrors(t *testing.T) {
	m, _ := loadFixture(t, "qwen3")
	b, err := backend.Open("cuda:0", m, backend.Options{NumBlocks: 8, Tuning: &Tuning{Emulate: true}})
	if err != nil {
		t.Fatal(err)
	}
	if b.NumBlocks() != 8 || b.BlockSize() != 16 || b.VocabSize() != m.Config.VocabSize {
		t.Fatalf("blocks %d size %d vocab %d", b.NumBlocks(), b.BlockSize(), b.VocabSize())
	}
	if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{8}}}}); err == nil {
		t.Fatal("the dummy block was accepted from a block table")
	}
	_ = b.Close()
	if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{0}}}}); err == nil {
		t.Fatal("forward after Close succeeded")
	}
	if _, err := backend.Open("cuda", m, backend.Options{NumBlocks: 8, Tuning: cpu.Tuning{}}); err == nil {
		t.Fatal("a CPU tuning was accepted")
	}
	if _, err := backend.Open("cuda", m, backend.Options{NumBlocks: 8, KVCacheDType: backend.KVF16, Tuning: Tuning{Emulate: true}}); err == nil {
		t.Fatal("an f16 KV cache was accepted")
	}
	// sized from free memory: the emulator's 8 GiB less the reserve, at a fraction
	e, err := backend.Open("cuda", m, backend.Options{KVCacheFraction: 0.001, Tuning: Tuning{Emulate: true}})
	if err != nil {
		t.Fatal(err)
	}
	if e.NumBlocks() < 10 {
		t.Fatalf("fraction sized %d blocks", e.NumBlocks())
	}
	_ = e.Close()
}

// Without a GPU the real device fails with the loader's own error, the device named (by
// backend.Open) and what to run instead; on a GPU machine without a built fatbin it names the MANIFEST.
func TestRealDeviceRefusal(t *testing.T) {
	m, _ := loadFixture(t, "qwen3")
	t.Setenv(FatbinEnv, "")
	for _, name := range []string{"cuda", "cuda:1"} {
		_, err := backend.Open(name, m, backend.Options{NumBlocks: 8})
		if err == nil {
			t.Skip("a GPU and a built fatbin are present")
		}
		t.Logf("%s refused: %v", name, err)
		want := []string{name + " backend: "}
		if cu.Load() != nil {
			want = append(want, "load driver", "no NVIDIA driver here: --device cpu runs on the CPU, "+EmulateEnv+"=1 on the emulated device")
		} else if name == "cuda" {
			want = append(want, "not built yet")
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", name, err, w)
			}
		}
	}
}
