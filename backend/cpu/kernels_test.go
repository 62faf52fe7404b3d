package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
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

// TestKeyKernels checks attendHalf's kernels against the arithmetic they promise, on BF16 and
// F16 rows: a score is dotRows4Asm's sum over the widened key (its lane chains and pairwise
// tree), whichever variant computes it and wherever its key sits; an output element is one
// fused multiply-add per key, in order, the same bits whether the rows are widened in
// registers or beforehand and whatever queries share the pass.
func TestKeyKernels(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range []quant.Type{quant.F16, quant.BF16} {
		for _, n := range []int{8, 24, 64, 128, 72} {
			for _, cnt := range []int{1, 2, 3, 4, 5, 7, 16} {
				for _, nq := range []int{1, 2, 3, 4, 5, 7, 16} {
					ldk, ldq, ldo := n+8, n+16, cnt+3
					half := make([]uint16, cnt*ldk)
					for i, v := range randSlice(rng, len(half)) {
						if typ == quant.BF16 {
							half[i] = model.Float32ToBF16(v)
						} else {
							half[i] = model.Float32ToHalf(v)
						}
					}
					wide := make([]float32, len(half))
					linear.Widen(typ, half, wide)
					q := randSlice(rng, nq*ldq)
					name := fmt.Sprintf("%v n=%d keys=%d queries=%d", typ, n, cnt, nq)

					scores := make([]float32, nq*ldo)
					dotKeys(q, ldq, nq, half, ldk, n, cnt, scores, ldo, typ)
					var four [4]float32
					for i := range nq {
						for r := range cnt {
							dotRows4Asm(&q[i*ldq], &wide[r*ldk], 0, n, &four) // the key four times
							if got := scores[i*ldo+r]; math.Float32bits(got) != math.Float32bits(four[0]) {
								t.Fatalf("%s: score(%d, %d) = %v, want %v", name, i, r, got, four[0])
							}
						}
					}

					// p: nq rows of cnt weights; out: nq rows of n, starting nonzero.
					p := randSlice(rng, nq*ldo)
					start := randSlice(rng, nq*(n+8))
					want := slices.Clone(start)
					for i := range nq {
						for d := range n {
							acc := want[i*(n+8)+d]
							for r := range cnt {
								acc = fma32(p[i*ldo+r], wide[r*ldk+d], acc)
							}
							want[i*(n+8)+d] = acc
						}
					}
					for _, w := range [][]float32{nil, wide} {
						got := slices.Clone(start)
						axpyKeys(p, ldo, nq, half, w, ldk, n, cnt, got, n+8, typ)
						// The same keys in two calls must continue each chain exactly.
						split := slices.Clone(start)
						if cnt > 1 {
							c := cnt / 2
							axpyKeys(p, ldo, nq, half, w, ldk, n, c, split, n+8, typ)
							var rest []float32
							if w != nil {
								rest = w[c*ldk:]
							}
							axpyKeys(p[c:], ldo, nq, half[c*ldk:], rest, ldk, n, cnt-c, split, n+8, typ)
						} else {
							axpyKeys(p, ldo, nq, half, w, ldk, n, cnt, split, n+8, typ)
						}
						for i := range nq {
							for d := range n {
								o := i*(n+8) + d
								if math.Float32bits(got[o]) != math.Float32bits(want[o]) || math.Float32bits(split[o]) != math.Float32bits(want[o]) {
									t.Fatalf("%s widened=%v: out(%d, %d) = %v (split %v), want %v", name, w != nil, i, d, got[o], split[o], want[o])
								}
							}
						}
					}
				}
			}
		}
	}
}

// fma32 returns a·b + c rounded once to float32, as VFMADD231PS computes it. a·b is exact in
// float64; rounding the float64 sum to float32 again could differ from one rounding only when
// the first lands exactly halfway between two float32 values, so that case is redone exactly.
func fma32(a, b, c float32) float32 {
	r := math.FMA(float64(a), float64(b), float64(c))
	f := float32(r)
	lo, hi := math.Nextafter32(f, float32(math.Inf(-1))), math.Nextafter32(f, float32(math.Inf(1)))
	if r != float64(f) && (r-float64(lo) == float64(f)-r || float64(hi)-r == r-float64(f)) {
		x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetFloat64(float64(c)))
		f, _ = x.Float32()
	}
	return f
}

// TestSwiGLUSIMD checks that the AVX2 swiGLU gives the same bits as the Go loop, on ordinary
// values and on exp32's edges (overflow, underflow, NaN, infinities, zeros, subnormals).
func TestSwiGLUSIMD(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	edges := []float32{0, float32(math.Copysign(0, -1)), 88.8, -88.8, 88.79, -88.81, 104, -104, 104.01, -104.01, 87.3, -87.3, 100, -100, 1e-40, -1e-40,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0xffc00001), 3e38, -3e38}
	for _, n := range []int{3, 4, 5, 64, 3072, 1027} {
		gate := randSlice(rng, n)
		for i := range gate {
			switch rng.IntN(3) {
			case 0:
				gate[i] *= 30
			case 1:
				gate[i] = edges[rng.IntN(len(edges))]
			}
		}
		up := randSlice(rng, n)
		want := append([]float32(nil), gate...)
		swiGLU(want, up, false)
		got := append([]float32(nil), gate...)
		swiGLU(got, up, true)
		for i := range n {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("n=%d: silu(%v)·%v = %v (%#x), want %v (%#x)", n, gate[i], up[i], got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
}

// TestSoftmaxSIMD checks that softmaxScaled with the AVX2 exponentials gives the Go loop's bits,
// scores far below the maximum (exponentials that underflow) included.
func TestSoftmaxSIMD(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 3, 4, 7, 16, 33, 160, 1000} {
		for _, spread := range []float64{1, 30, 3000} {
			s := randSlice(rng, n)
			for i := range s {
				s[i] *= float32(spread)
			}
			want, got := append([]float32(nil), s...), append([]float32(nil), s...)
			softmaxScaled(want, 0.088, false)
			softmaxScaled(got, 0.088, true)
			for i := range n {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d spread=%v: p[%d] = %v, want %v", n, spread, i, got[i], want[i])
				}
			}
			// The Go path itself: within float32 rounding of a float64 softmax of the same
			// float32 exponents.
			var ref []float64
			m, sum := float32(math.Inf(-1)), 0.0
			for _, v := range s {
				m = max(m, v)
			}
			for _, v := range s {
				e := math.Exp(float64((v - m) * 0.088))
				ref, sum = append(ref, e), sum+e
			}
			for i := range n {
				if d := math.Abs(float64(want[i]) - ref[i]/sum); d > 1e-6*ref[i]/sum+1e-30 {
					t.Fatalf("n=%d spread=%v: p[%d] = %v, float64 reference %v", n, spread, i, want[i], ref[i]/sum)
				}
			}
		}
	}
	// Special values anywhere (in the kernels' part and in the tail): NaN, ±Inf, signed zeros.
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1))}
	for _, n := range []int{8, 11, 17, 40} {
		for _, sp := range specials {
			for _, at := range []int{0, 5, n - 1} {
				s := randSlice(rng, n)
				s[at] = sp
				if at != n-1 {
					s[n-1] = specials[(at+3)%len(specials)]
				}
				want, got := append([]float32(nil), s...), append([]float32(nil), s...)
				softmaxScaled(want, 0.088, false)
				softmaxScaled(got, 0.088, true)
				for i := range n {
					w, g := want[i], got[i]
					if w != w && g != g {
						continue // both NaN: the payload is not specified
					}
					if math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("n=%d %v at %d: p[%d] = %v, want %v", n, sp, at, i, g, w)
					}
				}
			}
		}
	}
}
