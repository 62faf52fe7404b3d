package cuda

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/backend/cuda/internal/emu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// benchShapes are the decode benchmark's model shapes (config.json of the public checkpoints).
// A shape with variants runs graphs on and off and Q8_0 / Q4_K weights too; Qwen3-8B, the model
// of vLLM's published 7.22 ms TPOT on an H100 (GPU.md section 4), runs bf16 with graphs only.
var benchShapes = []struct {
	name     string
	cfg      model.Config
	variants bool
}{
	{"qwen3-0.6b", model.Config{Architecture: model.FamilyQwen3, HiddenSize: 1024, IntermediateSize: 3072, NumLayers: 28,
		NumHeads: 16, NumKVHeads: 8, HeadDim: 128, RMSNormEps: 1e-6, VocabSize: 151936, MaxPositions: 40960,
		TieWordEmbeddings: true, QKNorm: true, Rope: model.Rope{Theta: 1e6}}, true},
	{"llama-3.1-8b", model.Config{Architecture: model.FamilyLlama, HiddenSize: 4096, IntermediateSize: 14336, NumLayers: 32,
		NumHeads: 32, NumKVHeads: 8, HeadDim: 128, RMSNormEps: 1e-5, VocabSize: 128256, MaxPositions: 131072,
		Rope: model.Rope{Theta: 5e5, Type: model.RopeLlama3, Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}, true},
	{"qwen3-8b", model.Config{Architecture: model.FamilyQwen3, HiddenSize: 4096, IntermediateSize: 12288, NumLayers: 36,
		NumHeads: 32, NumKVHeads: 8, HeadDim: 128, RMSNormEps: 1e-6, VocabSize: 151936, MaxPositions: 40960,
		QKNorm: true, Rope: model.Rope{Theta: 1e6}}, false},
}

// benchCtx is the context length decode steps run at.
const benchCtx = 1024

// copyRate measures the device's copy bandwidth once per process: 1 GiB copied device to
// device 4 times, counted as bytes read plus bytes written per second.
var copyRate = sync.OnceValues(func() (float64, error) {
	d, err := openDriver(0)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	const n = 1 << 30
	src, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(src)
	dst, err := d.Alloc(n)
	if err != nil {
		return 0, err
	}
	defer d.Free(dst)
	if err := d.Copy(dst, src, n); err != nil { // warm-up
		return 0, err
	}
	ms, err := d.Elapsed(func() error {
		for range 4 {
			if err := d.Copy(dst, src, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return 2 * 4 * n / (float64(ms) / 1e3), nil
})

// benchRecord is one line of LLMSERVE_BENCH_JSON.
type benchRecord struct {
	Name          string  `json:"name"`
	MsPerStep     float64 `json:"ms_per_step"`
	TokPerSec     float64 `json:"tok_per_s"`
	BytesPerStep  float64 `json:"bytes_per_step"`
	CopyRate      float64 `json:"copy_bytes_per_s"`
	RooflineShare float64 `json:"roofline_share"`
}

var benchOut sync.Mutex

func writeBench(r benchRecord) {
	path := os.Getenv("LLMSERVE_BENCH_JSON")
	if path == "" {
		return
	}
	benchOut.Lock()
	defer benchOut.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_ = json.NewEncoder(f).Encode(r)
}

func BenchmarkCopyBandwidth(b *testing.B) {
	probeGPU(b)
	for range b.N {
		rate, err := copyRate()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rate/1e12, "TB/s")
		writeBench(benchRecord{Name: "copy", CopyRate: rate})
	}
}

// BenchmarkDecode times decode steps of B sequences at context benchCtx on model shapes whose
// weights and KV pool are made on the GPU, with and without graphs, batch-dependent (decode rows
// on cuBLASLt, batch 64 and 256), and with Q8_0 and Q4_K weights (graphs, batch 1 and 64); the
// roofline is the weights (all but the input embedding) plus every sequence's KV read once per
// step, over the copy rate measured in the same run.
func BenchmarkDecode(b *testing.B) {
	probeGPU(b)
	for _, s := range benchShapes {
		for _, graphs := range []bool{true, false} {
			if !graphs && !s.variants {
				continue
			}
			for _, batch := range []int{1, 64, 256} {
				name := fmt.Sprintf("%s/B=%d/graphs=%v", s.name, batch, graphs)
				b.Run(name, func(b *testing.B) { benchDecode(b, name, s.cfg, quant.BF16, batch, graphs, false, 0) })
			}
		}
		for _, batch := range []int{64, 256} { // schedulerd --batch-dependent: cuBLASLt decode rows
			name := fmt.Sprintf("%s/B=%d/graphs=true/batch-dependent", s.name, batch)
			b.Run(name, func(b *testing.B) {
				benchDecode(b, name, s.cfg, quant.BF16, batch, true, false, BatchDependentDecodeRows)
			})
		}
		if !s.variants {
			continue
		}
		for _, qt := range []quant.Type{quant.Q8_0, quant.Q4_K} {
			for _, batch := range []int{1, 64} {
				name := fmt.Sprintf("%s-%s/B=%d/graphs=true", s.name, qt, batch)
				b.Run(name, func(b *testing.B) { benchDecode(b, name, s.cfg, qt, batch, true, false, 0) })
			}
		}
	}
}

// BenchmarkDecodeProfile breaks eager decode steps (bf16, context benchCtx) down by kernel:
// each launch between two events, so the table says where a step's device time goes (the
// kernels no longer overlap; the step's total is a little above BenchmarkDecode's).
func BenchmarkDecodeProfile(b *testing.B) {
	probeGPU(b)
	for _, s := range benchShapes {
		for _, batch := range []int{1, 64} {
			name := fmt.Sprintf("%s/B=%d", s.name, batch)
			b.Run(name, func(b *testing.B) { benchDecode(b, name, s.cfg, quant.BF16, batch, false, true, 0) })
		}
	}
}

// benchDecode times decode steps (or, with profile, breaks them down by kernel: see
// BenchmarkDecodeProfile); ltRows is Tuning.LtDecodeRows.
func benchDecode(b *testing.B, name string, cfg model.Config, qt quant.Type, batch int, graphs, profile bool, ltRows int) {
	d, err := openDriver(0)
	if err != nil {
		noGPU(b, err)
	}
	var bd dev.Device = d
	var prof *dev.Profile
	if profile {
		prof = dev.NewProfile(d)
		bd, graphs = prof, false
	}
	blocksPer := (benchCtx + 1 + 15) / 16
	opts := backend.Options{NumBlocks: batch * blocksPer}
	be, err := newBackendWith(bd, cfg, opts, Tuning{NoGraphs: !graphs, MaxPositions: 2 * benchCtx, LtDecodeRows: ltRows},
		func(allocs *[]dev.Ptr) (*weights, error) { return fillWeights(d, cfg, qt, allocs) })
	if err != nil {
		_ = d.Close()
		b.Fatal(err)
	}
	defer be.Close()
	// the KV pool holds random values: decode reads benchCtx positions per sequence
	perBlock := cfg.NumKVHeads * 16 * cfg.HeadDim
	for l := range cfg.NumLayers {
		for _, p := range []dev.Ptr{be.kcache[l], be.vcache[l]} {
			n := uint64((be.numBlocks + 1) * perBlock)
			if err := d.Launch(dev.KFillBF16, dev.D1(int((n+1023)/1024)), dev.D1(256), 0, dev.Pack(&dev.FillArgs{Out: p, N: n, Seed: uint32(l), Scale: 1})); err != nil {
				b.Fatal(err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(be.numBlocks)
	var bt backend.Batch
	for i := range batch {
		table := make([]int32, blocksPer)
		for j := range table {
			table[j] = int32(perm[i*blocksPer+j])
		}
		bt.Seqs = append(bt.Seqs, backend.Seq{Tokens: []int32{int32(rng.IntN(cfg.VocabSize))}, Pos: benchCtx, BlockTable: table, Logits: true})
	}
	ctx := context.Background()
	step := func() error { // on the device goroutine, as Forward runs a step
		return bd.Run(func() error {
			_, err := be.run(ctx, &bt)
			return err
		})
	}
	for range 3 { // warm-up, graph capture
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	if prof != nil {
		const steps = 5
		prof.Reset()
		for range steps {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
		total := 0.0
		times := prof.Times()
		for _, t := range times {
			total += t.Ms
		}
		b.Logf("%s: %.3f ms of kernels per step (%d steps, each launch timed alone)", name, total/steps, steps)
		for _, t := range times {
			if t.Ms/total < 0.002 {
				break
			}
			b.Logf("%7.1f us %5.1f%% %4d calls  %s", 1e3*t.Ms/steps, 100*t.Ms/total, t.Calls/steps, t.Name)
		}
		b.ReportMetric(total/steps, "ms/step")
		return
	}
	var times []float64
	b.ResetTimer()
	for range max(b.N, 20) {
		ms, err := d.Elapsed(step)
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, float64(ms))
	}
	b.StopTimer()
	slices.Sort(times)
	med := times[len(times)/2]
	embedBytes, err := qt.RowBytes(cfg.HiddenSize)
	if err != nil {
		b.Fatal(err)
	}
	embedBytes *= cfg.VocabSize
	weightBytes := float64(be.w.bytes) - float64(embedBytes)
	if cfg.TieWordEmbeddings {
		weightBytes += float64(embedBytes) // the tied matrix is read as the LM head
	}
	kvBytes := float64(batch) * float64(benchCtx+1) * float64(2*cfg.NumLayers*cfg.NumKVHeads*cfg.HeadDim*2)
	r := benchRecord{Name: name, MsPerStep: med, TokPerSec: float64(batch) / (med / 1e3), BytesPerStep: weightBytes + kvBytes}
	if rate, err := copyRate(); err == nil {
		r.CopyRate = rate
		r.RooflineShare = (r.BytesPerStep / rate) / (med / 1e3)
	}
	b.ReportMetric(med, "ms/step")
	b.ReportMetric(r.TokPerSec, "tok/s")
	b.ReportMetric(r.RooflineShare, "roofline")
	writeBench(r)
}

// gemvShapes are the decode GEMMs' benchmark shapes {N, K}: Qwen3-0.6B's fused gate|up and down
// projections, Llama-3.1-8B's, and the 8B LM head.
var gemvShapes = []struct {
	name string
	n, k int
}{
	{"0.6b-gate_up", 6144, 1024}, {"0.6b-down", 1024, 3072},
	{"8b-gate_up", 28672, 4096}, {"8b-down", 4096, 14336}, {"8b-lm_head", 128256, 4096},
}

// BenchmarkDecodeGemm times a launch (the median over 20 runs of 10) of each decode GEMM (bf16, Q8_0, Q4_K weights) at 1, 4
// and 16 rows and compares it with streaming its weights at the copy rate measured in the same
// run (roofline share 1 = the weights read at copy bandwidth). Weights are random bytes made on
// the device (the kernels' time does not depend on their values).
func BenchmarkDecodeGemm(b *testing.B) {
	d, err := openDriver(0)
	if err != nil {
		noGPU(b, err)
	}
	defer d.Close()
	types := []struct {
		name string
		kern dev.Kernel
		qt   quant.Type
	}{{"bf16", dev.KGemv, quant.BF16}, {"q8_0", dev.KGemvQ8_0, quant.Q8_0}, {"q4_k", dev.KGemvQ4_K, quant.Q4_K}}
	for _, s := range gemvShapes {
		for _, ty := range types {
			rb, err := ty.qt.RowBytes(s.k)
			if err != nil {
				b.Fatal(err)
			}
			bytes := rb * s.n
			w, err := d.Alloc(int64(bytes))
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Launch(dev.KFillBF16, dev.D1((bytes/2+1023)/1024), dev.D1(256), 0, dev.Pack(&dev.FillArgs{Out: w, N: uint64(bytes / 2), Seed: 5, Scale: 0.01})); err != nil {
				b.Fatal(err)
			}
			for _, m := range []int{1, 4, 16} {
				name := fmt.Sprintf("%s/%s/M=%d", s.name, ty.name, m)
				b.Run(name, func(b *testing.B) {
					x, err := d.Alloc(int64(4 * m * s.k))
					if err != nil {
						b.Fatal(err)
					}
					defer d.Free(x)
					out, err := d.Alloc(int64(4 * m * s.n))
					if err != nil {
						b.Fatal(err)
					}
					defer d.Free(out)
					if err := d.Launch(dev.KFillBF16, dev.D1((2*m*s.k+1023)/1024), dev.D1(256), 0, dev.Pack(&dev.FillArgs{Out: x, N: uint64(2 * m * s.k), Seed: 6, Scale: 1})); err != nil {
						b.Fatal(err)
					}
					args := dev.Pack(&dev.GemvArgs{Out: out, X: x, W: w, M: int32(m), N: int32(s.n), K: int32(s.k), Ldx: int32(s.k), Ldo: int32(s.n)})
					launch := func() error {
						return d.Launch(ty.kern, dev.GemvGrid(m, s.n), dev.D1(32*dev.GemvWarps), 0, args)
					}
					for range 3 {
						if err := launch(); err != nil {
							b.Fatal(err)
						}
					}
					var times []float64
					b.ResetTimer()
					for range max(b.N, 20) {
						ms, err := d.Elapsed(func() error { // 10 back to back: launch gaps amortised
							return d.Run(func() error {
								for range 10 {
									if err := launch(); err != nil {
										return err
									}
								}
								return nil
							})
						})
						if err != nil {
							b.Fatal(err)
						}
						times = append(times, float64(ms)/10)
					}
					b.StopTimer()
					slices.Sort(times)
					med := times[len(times)/2]
					r := benchRecord{Name: "gemv/" + name, MsPerStep: med, BytesPerStep: float64(bytes)}
					if rate, err := copyRate(); err == nil {
						r.CopyRate = rate
						r.RooflineShare = (r.BytesPerStep / rate) / (med / 1e3)
					}
					b.ReportMetric(med*1e3, "us")
					b.ReportMetric(r.RooflineShare, "roofline")
					writeBench(r)
				})
			}
			_ = d.Free(w)
		}
	}
}

// TestBenchShapesDecode: every decode benchmark shape, cut to one layer, a small vocabulary and
// a narrow MLP (its attention and hidden sizes kept), opens with weights made on the emulated
// device and decodes a step to finite logits, so a GPU run of BenchmarkDecode does not find a
// shape the backend refuses.
func TestBenchShapesDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("the 8B shapes' layers take seconds on the emulator")
	}
	for _, s := range benchShapes {
		t.Run(s.name, func(t *testing.T) {
			cfg := s.cfg
			cfg.NumLayers, cfg.VocabSize, cfg.IntermediateSize = 1, 512, 256
			d := emu.New(1 << 30)
			be, err := newBackendWith(d, cfg, backend.Options{NumBlocks: 4}, Tuning{Emulate: true, MaxPositions: 2 * benchCtx},
				func(allocs *[]dev.Ptr) (*weights, error) { return fillWeights(d, cfg, quant.BF16, allocs) })
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			decodeTwoFinite(t, be)
		})
	}
}

// BenchmarkLtGemm times cuBLASLt (its plan's algorithm, the bf16 cast of the activations
// included) against the built-in decode GEMM at the decode shapes and 16, 64 and 256 rows: the
// data for Tuning.LtDecodeRows (from how many decode rows the library wins). Median of 20 runs of
// 5 launches each.
func BenchmarkLtGemm(b *testing.B) {
	d, err := openDriver(0)
	if err != nil {
		noGPU(b, err)
	}
	defer d.Close()
	if _, err := d.MatmulLib(); err != nil {
		if requireGPU {
			b.Fatalf("no cuBLASLt, and %s=1: %v", RequireGPUEnv, err)
		}
		b.Skipf("no cuBLASLt: %v", err)
	}
	const maxRows = 256
	for _, s := range gemvShapes {
		alloc := func(n int) dev.Ptr {
			p, err := d.Alloc(int64(n))
			if err != nil {
				b.Fatal(err)
			}
			return p
		}
		w, x, xb, out := alloc(2*s.n*s.k), alloc(4*maxRows*s.k), alloc(2*maxRows*s.k), alloc(4*maxRows*s.n)
		for _, f := range []dev.FillArgs{{Out: w, N: uint64(s.n * s.k), Seed: 5, Scale: 0.01}, {Out: x, N: uint64(2 * maxRows * s.k), Seed: 6, Scale: 1}} {
			if err := d.Launch(dev.KFillBF16, dev.D1(int(f.N+1023)/1024), dev.D1(256), 0, dev.Pack(&f)); err != nil {
				b.Fatal(err)
			}
		}
		for _, m := range []int{16, 64, maxRows} {
			gemv := dev.Pack(&dev.GemvArgs{Out: out, X: x, W: w, M: int32(m), N: int32(s.n), K: int32(s.k), Ldx: int32(s.k), Ldo: int32(s.n)})
			cast := dev.Pack(&dev.CastArgs{Out: xb, X: x, Rows: int32(m), K: int32(s.k), Ldx: int32(s.k)})
			for _, path := range []struct {
				name string
				run  func() error
			}{
				{"gemv", func() error { return d.Launch(dev.KGemv, dev.GemvGrid(m, s.n), dev.D1(32*dev.GemvWarps), 0, gemv) }},
				{"cublaslt", func() error {
					if err := d.Launch(dev.KCastBF16, dev.D1(m), dev.D1(256), 0, cast); err != nil {
						return err
					}
					return d.Matmul(dev.MatmulArgs{Out: out, X: xb, W: w, M: m, N: s.n, K: s.k, Ldx: s.k, Ldo: s.n})
				}},
			} {
				name := fmt.Sprintf("%s/%s/M=%d", s.name, path.name, m)
				b.Run(name, func(b *testing.B) {
					for range 3 {
						if err := path.run(); err != nil {
							b.Fatal(err)
						}
					}
					var times []float64
					for range max(b.N, 20) {
						ms, err := d.Elapsed(func() error {
							return d.Run(func() error {
								for range 5 {
									if err := path.run(); err != nil {
										return err
									}
								}
								return nil
							})
						})
						if err != nil {
							b.Fatal(err)
						}
						times = append(times, float64(ms)/5)
					}
					slices.Sort(times)
					med := times[len(times)/2]
					b.ReportMetric(med*1e3, "us")
					writeBench(benchRecord{Name: "ltgemm/" + name, MsPerStep: med, BytesPerStep: float64(2 * s.n * s.k)})
				})
			}
		}
		for _, p := range []dev.Ptr{w, x, xb, out} {
			_ = d.Free(p)
		}
	}
}

// TestProfileBreaksDownAStep: a decode step through dev.Profile on the emulator records every
// kernel of the step by name and grid, with the calls a layer makes (one attention decode per
// layer) and a time for each.
func TestProfileBreaksDownAStep(t *testing.T) {
	cfg := benchShapes[0].cfg
	cfg.NumLayers, cfg.VocabSize, cfg.IntermediateSize = 2, 512, 256
	d := emu.New(1 << 30)
	prof := dev.NewProfile(d)
	be, err := newBackendWith(prof, cfg, backend.Options{NumBlocks: 4}, Tuning{Emulate: true, NoGraphs: true, MaxPositions: 64},
		func(allocs *[]dev.Ptr) (*weights, error) { return fillWeights(d, cfg, quant.BF16, allocs) })
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	prof.Reset()
	if _, err := be.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
		{Tokens: []int32{3}, Pos: 0, BlockTable: []int32{0}, Logits: true},
	}}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, k := range prof.Times() {
		if k.Calls <= 0 || k.Ms < 0 {
			t.Errorf("%s: %d calls, %v ms", k.Name, k.Calls, k.Ms)
		}
		calls[strings.Fields(k.Name)[0]] += k.Calls
	}
	if calls["attn_decode"] != cfg.NumLayers || calls["attn_merge"] != cfg.NumLayers {
		t.Errorf("attention launches %v, want %d of each per step", calls, cfg.NumLayers)
	}
	if calls["gemv_bf16"] == 0 {
		t.Errorf("no decode GEMM recorded: %v", calls)
	}
}

// decodeTwoFinite decodes one token of two sequences (blocks 0 and 1) on be and fails on any
// logit that is not finite.
func decodeTwoFinite(t *testing.T, be *Backend) {
	t.Helper()
	out, err := be.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
		{Tokens: []int32{3}, Pos: 0, BlockTable: []int32{0}, Logits: true},
		{Tokens: []int32{7}, Pos: 0, BlockTable: []int32{1}, Logits: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range out {
		for j, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("seq %d logit %d is %v", i, j, v)
			}
		}
	}
}
