package avx2

import (
	"math"
	"math/rand/v2"
	"testing"
)

func naiveDot(x, y []float32) float64 {
	var s float64
	for i := range x {
		s += float64(x[i]) * float64(y[i])
	}
	return s
}

func TestKernelsMatchNaive(t *testing.T) {
	if !Available {
		t.Skip("AVX2/FMA not available on this machine or build")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for _, blocks := range []int{0, 1, 2, 3, 17, 64} {
		k := 8 * blocks
		lda, ldb := k+5, k+3 // padded rows: the kernels must honor the strides
		a := make([]float32, 4*lda)
		b := make([]float32, 4*ldb)
		for i := range a {
			a[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		var out12 [12]float32
		var out4 [4]float32
		Dot4x3(blocks, &a[0], lda, &b[0], ldb, &out12)
		Dot1x4(blocks, &a[0], &b[0], ldb, &out4)
		tol := 1e-5 * float64(1+k)
		for r := range 4 {
			for c := range 3 {
				want := naiveDot(a[r*lda:r*lda+k], b[c*ldb:c*ldb+k])
				if got := float64(out12[r*3+c]); math.Abs(got-want) > tol {
					t.Fatalf("Dot4x3 blocks=%d out[%d][%d] = %v, want %v", blocks, r, c, got, want)
				}
			}
		}
		for c := range 4 {
			want := naiveDot(a[:k], b[c*ldb:c*ldb+k])
			if got := float64(out4[c]); math.Abs(got-want) > tol {
				t.Fatalf("Dot1x4 blocks=%d out[%d] = %v, want %v", blocks, c, got, want)
			}
		}
	}
}

func TestAddNN4x16(t *testing.T) {
	if !Available {
		t.Skip("AVX2/FMA not available on this machine or build")
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for _, k := range []int{0, 1, 7, 33} {
		lda, ldb, ldc := k+3, 19, 21
		a := make([]float32, 4*lda)
		b := make([]float32, max(k, 1)*ldb)
		c := make([]float32, 4*ldc)
		for _, x := range [][]float32{a, b, c} {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
		}
		want := make([]float64, len(c))
		for i := range c {
			want[i] = float64(c[i])
		}
		for r := range 4 {
			for j := range 16 {
				for p := range k {
					want[r*ldc+j] += float64(a[r*lda+p]) * float64(b[p*ldb+j])
				}
			}
		}
		AddNN4x16(k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		for i := range c {
			if math.Abs(float64(c[i])-want[i]) > 1e-5*float64(1+k) {
				t.Fatalf("k=%d: c[%d] = %v, want %v (columns 16..ldc must be untouched)", k, i, c[i], want[i])
			}
		}
	}
}

// BenchmarkDot4x3 measures the micro-kernel alone on L1-resident rows, the ceiling for the GEMM.
func BenchmarkDot4x3(b *testing.B) {
	if !Available {
		b.Skip("AVX2/FMA not available")
	}
	const blocks = 64
	x := make([]float32, 4*8*blocks)
	y := make([]float32, 3*8*blocks)
	var out [12]float32
	for b.Loop() {
		Dot4x3(blocks, &x[0], 8*blocks, &y[0], 8*blocks, &out)
	}
	b.ReportMetric(2*12*8*blocks*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}

func BenchmarkDot1x4(b *testing.B) {
	if !Available {
		b.Skip("AVX2/FMA not available")
	}
	const blocks = 64
	x := make([]float32, 8*blocks)
	y := make([]float32, 4*8*blocks)
	var out [4]float32
	for b.Loop() {
		Dot1x4(blocks, &x[0], &y[0], 8*blocks, &out)
	}
	b.ReportMetric(2*4*8*blocks*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}
