package linear

import (
	"fmt"
	"math"
	"time"

	"github.com/llmserve/llmserve/model"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/llmserve/llmserve/quant"
)

// BenchmarkMatMul times one Qwen3-0.6B-shaped projection set (gate/up 6144×1024, down 1024×3072,
// 8 layers' worth so the weights do not fit in cache) for each kernel set, weight type and row
// count (auto: the default path; widened and stream: each path forced; bf16acts: the default
// with activations rounded to BF16 for BF16 weights), reporting the weight
// read rate (GB/s) and arithmetic rate (GFLOP/s).
func BenchmarkMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []quant.Type{quant.BF16, quant.F32} {
		const layers = 8
		type pair struct{ n, k int }
		shapes := []pair{{6144, 1024}, {1024, 3072}}
		var list []matrixCase
		for range layers {
			for _, s := range shapes {
				w, _ := randomMatrix(rng, typ, s.n, s.k)
				list = append(list, matrixCase{w: w})
			}
		}
		for _, set := range sets {
			for _, m := range []int{1, 4, 16, 64, 512} {
				if m > 16 && set != sets[0] {
					continue
				}
				for _, path := range []string{"auto", "widened", "stream", "bf16acts"} {
					if path == "bf16acts" && (typ != quant.BF16 || set != sets[0]) {
						continue
					}
					if path == "widened" && (m == 1 || set != sets[0]) {
						continue
					}
					if path == "stream" && (m <= StreamMaxRows || set != sets[0]) {
						continue
					}
					b.Run(fmt.Sprintf("%s/%s/m%d/%s", typ, set.name, m, path), func(b *testing.B) {
						x := make([]float32, m*3072)
						out := make([]float32, m*6144)
						for i := range x {
							x[i] = rng.Float32()
						}
						mu := &Multiplier{Threads: runtime.GOMAXPROCS(0), set: set}
						switch path {
						case "widened":
							mu.StreamMaxRows = -1
						case "stream":
							mu.StreamMaxRows = m
						case "bf16acts":
							mu.BF16Activations = true
						}
						var bytes, flops float64
						for b.Loop() {
							for _, c := range list {
								mu.MatMul(c.w, m, x, c.w.Cols, out, c.w.Rows, false)
								bytes += float64(len(c.w.Data))
								flops += 2 * float64(m*c.w.Rows*c.w.Cols)
							}
						}
						b.ReportMetric(bytes/b.Elapsed().Seconds()/1e9, "GB/s")
						b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

// matrixCase is one weight matrix of a benchmark.
type matrixCase struct{ w model.Matrix }

// BenchmarkMultiKernels times the fastest set's multi kernels against dot4x1 computing the same
// outputs (four weight rows by each kernel's activation rows, k = 1024, all in L1): the
// arithmetic rate of batched decode once the weights stream, without memory in the way.
func BenchmarkMultiKernels(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	set := sets[0]
	const k = 1024
	for _, typ := range []quant.Type{quant.BF16, quant.F16, quant.F32} {
		ti, _ := floatIndex(typ)
		w, _ := randomMatrix(rng, typ, 4, k)
		rb := w.RowBytes()
		for _, mk := range set.multi[ti] {
			x := make([]float32, mk.m*k)
			for i := range x {
				x[i] = rng.Float32()
			}
			out := make([]float32, 4*mk.m)
			report := func(b *testing.B) {
				b.ReportMetric(float64(2*4*mk.m*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			}
			b.Run(fmt.Sprintf("%s/%s/m%d/dot4x1", typ, set.name, mk.m), func(b *testing.B) {
				var o4 [4]float32
				for b.Loop() {
					for i := range mk.m {
						set.dot4x1[ti](&w.Data[0], rb, &x[i*k], k, &o4)
					}
				}
				report(b)
			})
			b.Run(fmt.Sprintf("%s/%s/m%d/multi", typ, set.name, mk.m), func(b *testing.B) {
				for b.Loop() {
					mk.f(&w.Data[0], rb, 4, &x[0], 4*k, k, &out[0])
				}
				report(b)
			})
		}
	}
}

// BenchmarkStreamRows times the streaming path for BF16 weights (Qwen3-0.6B-shaped projections,
// 4 layers' worth) at the row counts of a speculative verify pass, reporting the fastest pass over
// the set (ms; on a shared box less disturbed than the mean), so the marginal cost of one more
// activation row reads off against m1.
func BenchmarkStreamRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const layers = 4
	type pair struct{ n, k int }
	var list []matrixCase
	for range layers {
		for _, s := range []pair{{6144, 1024}, {1024, 3072}, {2048, 1024}, {1024, 2048}} {
			w, _ := randomMatrix(rng, quant.BF16, s.n, s.k)
			list = append(list, matrixCase{w: w})
		}
	}
	for _, set := range sets {
		for _, m := range []int{1, 2, 3, 4, 5, 6, 8, 9, 16, 32} {
			b.Run(fmt.Sprintf("%s/m%d", set.name, m), func(b *testing.B) {
				x := make([]float32, m*6144)
				out := make([]float32, m*6144)
				for i := range x {
					x[i] = rng.Float32()
				}
				mu := &Multiplier{Threads: runtime.GOMAXPROCS(0), set: set}
				best := time.Duration(math.MaxInt64)
				for b.Loop() {
					t := time.Now()
					for _, c := range list {
						mu.MatMulRows(c.w, m, x, c.w.Cols, out, c.w.Rows, false)
					}
					best = min(best, time.Since(t))
				}
				b.ReportMetric(best.Seconds()*1e3, "min-ms/pass")
			})
		}
	}
}
