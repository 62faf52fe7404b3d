package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExp32 checks the fast exponential against math.Exp over the range softmax and SiLU use,
// and at the edges.
func TestExp32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var worst float64
	for range 200000 {
		x := float32(rng.Float64()*180 - 100)
		want := math.Exp(float64(x))
		got := float64(exp32(x))
		if want < 1e-37 { // float32 subnormals lose relative precision
			continue
		}
		worst = max(worst, math.Abs(got-want)/want)
	}
	if worst > 1.2e-7 { // one float32 ulp is 6e-8 to 1.2e-7 relative
		t.Errorf("exp32 worst relative error %.3g", worst)
	}
	if exp32(0) != 1 || exp32(-200) != 0 || !math.IsInf(float64(exp32(100)), 1) || exp32(float32(math.NaN())) == exp32(float32(math.NaN())) {
		t.Errorf("exp32 edge cases: %v %v %v", exp32(0), exp32(-200), exp32(100))
	}
	if got := exp32(float32(math.Inf(-1))); got != 0 {
		t.Errorf("exp32(-Inf) = %v", got)
	}
}

// TestRowKernels compares the SIMD row kernels with plain loops for row counts and lengths
// around the four-row and eight-float steps.
func TestRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{8, 16, 64, 128, 24} {
		for _, rows := range []int{1, 3, 4, 5, 8, 16} {
			ld := n + 8
			q := randSlice(rng, n)
			k := randSlice(rng, rows*ld)
			p := randSlice(rng, rows)
			for _, simd := range []bool{false, haveSIMD} {
				scores := make([]float32, rows)
				dotRows(q, k, ld, scores, simd)
				out := randSlice(rng, n)
				want := append([]float32(nil), out...)
				axpyRows(p, k, ld, out, simd)
				for r := range rows {
					var s float64
					for i := range n {
						s += float64(q[i]) * float64(k[r*ld+i])
						want[i] += p[r] * k[r*ld+i]
					}
					if math.Abs(float64(scores[r])-s) > 1e-5*(1+math.Abs(s)) {
						t.Errorf("n=%d rows=%d simd=%v: dot row %d = %v, want %v", n, rows, simd, r, scores[r], s)
					}
				}
				for i := range n {
					if math.Abs(float64(out[i]-want[i])) > 1e-5 {
						t.Errorf("n=%d rows=%d simd=%v: axpy[%d] = %v, want %v", n, rows, simd, i, out[i], want[i])
						break
					}
				}
			}
		}
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}
