package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkRowTile times the Go NT kernel on one widened weight panel (as package linear's
// matrix-product path multiplies it) against OpenBLAS's serial sgemm, by row tile.
func BenchmarkRowTile(b *testing.B) {
	for _, sh := range []struct{ m, n, k int }{{512, 256, 1024}, {512, 80, 3072}} {
		rng := rand.New(rand.NewPCG(3, 4))
		a := randMatrix(rng, sh.m, sh.k, sh.k)
		w := randMatrix(rng, sh.n, sh.k, sh.k)
		c := make([]float32, sh.m*sh.n)
		for _, tile := range []int{-1, 0, 4, 8, 16} {
			b.Run(fmt.Sprintf("m%d_n%d_k%d/tile%d", sh.m, sh.n, sh.k, tile), func(b *testing.B) {
				for b.Loop() {
					if tile < 0 {
						MatMulNTSerial(sh.m, sh.n, sh.k, a, sh.k, w, sh.k, c, sh.n, false)
					} else {
						matMulNTGoTiled(1, tile, sh.m, sh.n, sh.k, a, sh.k, w, sh.k, c, sh.n, false)
					}
				}
				b.ReportMetric(2*float64(sh.m)*float64(sh.n)*float64(sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
	}
}
