package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchShapes are decode-like (m = 1 or 8 rows against a square-ish weight) and prefill-like
// (hundreds of rows against a 3072×1024 projection) products.
var benchShapes = []struct{ m, n, k int }{
	{1, 1024, 1024}, {1, 3072, 1024}, {1, 1024, 3072}, {1, 3072, 3072},
	{8, 1024, 1024}, {8, 3072, 1024}, {8, 3072, 3072},
	{256, 3072, 1024}, {512, 3072, 1024},
}

func benchMul(b *testing.B, f mulFunc, transB bool) {
	for _, s := range benchShapes {
		b.Run(fmt.Sprintf("m=%d/n=%d/k=%d", s.m, s.n, s.k), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			a := randMatrix(rng, s.m, s.k, s.k)
			var w []float32
			ldb := s.k
			if transB {
				w = randMatrix(rng, s.n, s.k, s.k)
			} else {
				w = randMatrix(rng, s.k, s.n, s.n)
				ldb = s.n
			}
			c := make([]float32, s.m*s.n)
			b.ResetTimer()
			for b.Loop() {
				f(s.m, s.n, s.k, a, s.k, w, ldb, c, s.n, false)
			}
			b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}

func BenchmarkMatMulNTGo(b *testing.B) { benchMul(b, matMulNTGo, true) }
func BenchmarkMatMulNNGo(b *testing.B) { benchMul(b, matMulNNGo, false) }

// BenchmarkMatMulNT and BenchmarkMatMulNN measure the build's implementation (see Impl): OpenBLAS
// under cgo, where OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE matter.
func BenchmarkMatMulNT(b *testing.B) { benchMul(b, MatMulNT, true) }
func BenchmarkMatMulNN(b *testing.B) { benchMul(b, MatMulNN, false) }
