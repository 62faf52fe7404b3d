package quantmm

import (
	"fmt"
	"github.com/llmserve/llmserve/quant"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// Qwen3-0.6B's matrix shapes (rows x cols): q/o projections 1024x1024 (k/v are 1024x512 by rows),
// gate/up 3072x1024, down 1024x3072, and the 151936-row LM head.
var benchShapes = []struct{ rows, cols int }{{1024, 1024}, {3072, 1024}, {1024, 3072}, {151936, 1024}}

// BenchmarkMatMulDecode: one activation row (decode at batch 1) on 2 threads; the MB/s column
// is weight bytes read per second. Each op multiplies the next of enough distinct copies of the
// matrix (at least 256 MB, at most 200) that the weights stream from memory as in decode, not
// from cache; quant/testdata/ggmlbench times llama.cpp's kernels the same way.
//
//	flock /tmp/perf.lock go test -run XXX -bench MatMulDecode ./quant/
func BenchmarkMatMulDecode(b *testing.B) {
	benchMatMul(b, 1, benchThreads())
}

// BenchmarkMatMulDecode16: 16 activation rows (decode of 16 sequences) on 2 threads; MB/s is
// weight bytes per second, and GMAC/s the multiply-adds.
func BenchmarkMatMulDecode16(b *testing.B) {
	benchMatMul(b, 16, benchThreads())
}

// BenchmarkMatMulPrefill: 512 activation rows (a prefill chunk) on 2 threads; MB/s is weight
// bytes per second, and GMAC/s the multiply-adds.
func BenchmarkMatMulPrefill(b *testing.B) {
	benchMatMul(b, 512, benchThreads())
}

// cpuTime is the process's user and system CPU time in nanoseconds: on a machine other work
// shares, CPU time per op (the cpu-ns/op column) compares kernels where wall time cannot.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchThreads is 2 (this project's benchmark setting) unless QUANT_BENCH_THREADS says otherwise.
func benchThreads() int {
	if n, err := strconv.Atoi(os.Getenv("QUANT_BENCH_THREADS")); err == nil && n > 0 {
		return n
	}
	return 2
}

func benchMatMul(b *testing.B, m, threads int) {
	saved := activeKernels
	defer func() { activeKernels = saved }()
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q4_0, quant.Q6_K} {
		for _, s := range benchShapes {
			if m > 1 && s.rows > 4096 {
				continue
			}
			// Inputs are built inside the parent benchmark, so a -bench filter skips them.
			b.Run(fmt.Sprintf("%s/%dx%d", typ, s.rows, s.cols), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				w0, err := quant.Quantize(typ, randomWeights(rng, s.rows*s.cols), s.cols)
				if err != nil {
					b.Fatal(err)
				}
				copies := make([][]byte, min(200, (256<<20)/len(w0)+1))
				for i := range copies {
					copies[i] = append([]byte(nil), w0...)
				}
				x := randomWeights(rng, m*s.cols)
				out := make([]float32, m*s.rows)
				for _, k := range kernelSets() {
					b.Run(k.name, func(b *testing.B) {
						activeKernels = k
						b.SetBytes(int64(len(w0)))
						n := 0
						c0 := cpuTime()
						for b.Loop() {
							MatMul(typ, copies[n%len(copies)], s.rows, s.cols, x, m, out, s.rows, threads)
							n++
						}
						b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
						if m > 1 {
							b.ReportMetric(float64(m)*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
						}
					})
					if k.packed == nil || !packable(typ) { // every packed kernel, chosen or not
						continue
					}
					// The same product on the weights packed at load (pack.go).
					b.Run(k.name+"-packed", func(b *testing.B) {
						activeKernels = k
						packs := make([]*Packed, len(copies))
						for i, c := range copies {
							var err error
							if packs[i], err = pack(typ, c, s.rows, s.cols); err != nil {
								b.Fatal(err)
							}
						}
						b.SetBytes(int64(len(w0)))
						n := 0
						c0 := cpuTime()
						for b.Loop() {
							packs[n%len(packs)].MatMul(x, m, out, s.rows, threads)
							n++
						}
						b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op")
						if m > 1 {
							b.ReportMetric(float64(m)*float64(s.rows)*float64(s.cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
						}
					})
				}
			})
		}
	}
}
