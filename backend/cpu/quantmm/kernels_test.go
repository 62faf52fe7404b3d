package quantmm

import (
	"encoding/binary"
	"github.com/llmserve/llmserve/quant"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var quantTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K}

// withKernels runs f with each kernel set this machine can run made the active one.
func withKernels(t *testing.T, f func(t *testing.T, k kernelSet)) {
	saved := activeKernels
	defer func() { activeKernels = saved }()
	for _, k := range kernelSets() {
		activeKernels = k
		t.Run(k.name, func(t *testing.T) { f(t, k) })
	}
}

func randomWeights(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * 0.02
		if rng.IntN(50) == 0 {
			x[i] *= 8 // a few outliers, as real weights have
		}
	}
	return x
}

// TestMatMulAgainstReference: on every kernel path, MatMul equals the float64 dot product of
// llama.cpp's dequantized weights with x within the activation-quantization bound: each
// activation block is quantized with step d = max|x|/127, so its elements move by at most d/2
// and the block's contribution by at most d/2 * sum|w| over the block; float32 rounding of the
// block scales and the sums adds a relative 2e-5 of sum |w*x|.
func TestMatMulAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	withKernels(t, func(t *testing.T, k kernelSet) {
		for _, typ := range quantTypes {
			for _, shape := range []struct{ rows, cols, m, threads int }{
				{1, 256, 1, 1}, {37, 512, 1, 2}, {64, 1024, 1, 3}, {19, 256, 3, 1}, {33, 768, 4, 2}, {16, 512, 9, 4}, {70, 256, 6, 3},
			} {
				w := randomWeights(rng, shape.rows*shape.cols)
				q, err := quant.Quantize(typ, w, shape.cols)
				if err != nil {
					t.Fatal(err)
				}
				deq := make([]float32, len(w))
				if err := quant.Dequantize(typ, q, deq); err != nil {
					t.Fatal(err)
				}
				x := make([]float32, shape.m*shape.cols)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				const ldoPad = 3
				ldo := shape.rows + ldoPad
				out := make([]float32, shape.m*ldo)
				for i := range out {
					out[i] = 12345 // the padding must stay untouched
				}
				MatMul(typ, q, shape.rows, shape.cols, x, shape.m, out, ldo, shape.threads)
				bs := 32
				if typ == quant.Q4_K || typ == quant.Q6_K {
					bs = 256
				}
				for i := range shape.m {
					xi := x[i*shape.cols : (i+1)*shape.cols]
					for j := range shape.rows {
						wj := deq[j*shape.cols : (j+1)*shape.cols]
						var exact, bound, mag float64
						for b := 0; b < shape.cols; b += bs {
							var amax, wabs float64
							for c := b; c < b+bs; c++ {
								exact += float64(wj[c]) * float64(xi[c])
								mag += math.Abs(float64(wj[c]) * float64(xi[c]))
								amax = max(amax, math.Abs(float64(xi[c])))
								wabs += math.Abs(float64(wj[c]))
							}
							bound += amax / 127 / 2 * wabs
						}
						bound = bound*1.001 + 2e-5*mag
						got := float64(out[i*ldo+j])
						if math.Abs(got-exact) > bound {
							t.Fatalf("%s %dx%d m=%d: out[%d][%d] = %g, reference %g, |diff| %.3g > bound %.3g",
								typ, shape.rows, shape.cols, shape.m, i, j, got, exact, math.Abs(got-exact), bound)
						}
					}
					for j := shape.rows; j < ldo && i < shape.m-1; j++ {
						if out[i*ldo+j] != 12345 {
							t.Fatalf("%s: MatMul wrote out[%d][%d] beyond its rows", typ, i, j)
						}
					}
				}
			}
		}
	})
}

// exactInputs builds weights and activations whose scales are powers of two and whose quants are
// small (activations in [-7, 7], at most 22 significant bits in any partial sum), so every
// product and partial sum is exact in float32 and the kernels' results must agree
// bit for bit however they order the sums: any difference is a wrong integer.
func exactInputs(rng *rand.Rand, typ quant.Type, rows, cols, m int) ([]byte, *acts) {
	rb, _ := typ.RowBytes(cols)
	w := make([]byte, rows*rb)
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	pow2 := func() uint16 { return quant.ToF16(float32(math.Ldexp(1, -rng.IntN(2)))) }
	bb := typ.BlockBytes()
	for b := 0; b < len(w); b += bb {
		switch typ {
		case quant.Q8_0, quant.Q4_0:
			binary.LittleEndian.PutUint16(w[b:], pow2())
		case quant.Q4_K:
			binary.LittleEndian.PutUint16(w[b+q4kD:], pow2())
			binary.LittleEndian.PutUint16(w[b+q4kM:], pow2())
		case quant.Q6_K:
			binary.LittleEndian.PutUint16(w[b+q6kD:], pow2())
		}
	}
	a := new(acts)
	bs := a.shape(typ, m, cols)
	q := make([]int8, bs)
	for b := range m * a.nb {
		const lim = 8
		for i := range q {
			q[i] = int8(rng.IntN(2*lim-1) - (lim - 1))
		}
		a.setBlock(typ, b, q, float32(math.Ldexp(1, -rng.IntN(2))))
	}
	return w, a
}

// TestKernelsAgreeExactly: every SIMD path gives the portable path's results bit for bit on
// inputs where float32 arithmetic is exact, i.e. the same integer dot products, for every quant
// bit pattern (random weight bytes) and every tile shape.
func TestKernelsAgreeExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	type shape struct{ rows, cols, m int }
	shapes := []shape{{5, 256, 1}, {8, 512, 4}, {3, 1024, 7}, {9, 256, 13}, {10, 1024, 16}}
	// The 32-element block types also run an odd number of blocks per row, which the 512-bit
	// Q8_0 kernel (two blocks per step) finishes with a half step.
	// Every activation-row count from 1 to 17 against row counts that leave every remainder of
	// the tiles (up to 4 weight rows, or 2 pairs of rows, x 4 activation rows).
	for m := 1; m <= 17; m++ {
		shapes = append(shapes, shape{1 + m%8, 512, m})
	}
	small := append([]shape{{6, 96, 5}, {7, 160, 16}, {2, 32, 9}, {4, 32, 1}}, shapes...)
	for _, typ := range quantTypes {
		list := shapes
		if typ == quant.Q8_0 || typ == quant.Q4_0 {
			list = small
		}
		for _, shape := range list {
			w, a := exactInputs(rng, typ, shape.rows, shape.cols, shape.m)
			rb, _ := typ.RowBytes(shape.cols)
			want := make([]float32, shape.m*shape.rows)
			goKernels.rows(typ, w, rb, shape.rows, shape.cols, a, shape.m, want, shape.rows)
			for _, k := range kernelSets() {
				got := make([]float32, len(want))
				k.rows(typ, w, rb, shape.rows, shape.cols, a, shape.m, got, shape.rows)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s %s %+v: out %d = %g, portable path %g", k.name, typ, shape, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestMatMulRowsIndependent: a batch of m rows gives each row exactly what m=1 gives it, and
// the thread count does not change any result.
func TestMatMulRowsIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	withKernels(t, func(t *testing.T, k kernelSet) {
		for _, typ := range quantTypes {
			const rows, cols, m = 40, 512, 7
			q, _ := quant.Quantize(typ, randomWeights(rng, rows*cols), cols)
			x := randomWeights(rng, m*cols)
			batch := make([]float32, m*rows)
			MatMul(typ, q, rows, cols, x, m, batch, rows, 3)
			for i := range m {
				one := make([]float32, rows)
				MatMul(typ, q, rows, cols, x[i*cols:(i+1)*cols], 1, one, rows, 1)
				for j := range rows {
					if math.Float32bits(one[j]) != math.Float32bits(batch[i*rows+j]) {
						t.Fatalf("%s row %d col %d: alone %g, in a batch %g", typ, i, j, one[j], batch[i*rows+j])
					}
				}
			}
		}
	})
}

func TestMatMulFloatTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols, m = 5, 64, 2
	w := randomWeights(rng, rows*cols)
	x := randomWeights(rng, m*cols)
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		q, _ := quant.Quantize(typ, w, cols)
		deq := make([]float32, len(w))
		_ = quant.Dequantize(typ, q, deq)
		out := make([]float32, m*rows)
		MatMul(typ, q, rows, cols, x, m, out, rows, 2)
		for i := range m {
			for j := range rows {
				var s float64
				for c := range cols {
					s += float64(deq[j*cols+c]) * float64(x[i*cols+c])
				}
				if math.Abs(s-float64(out[i*rows+j])) > 1e-5 {
					t.Fatalf("%s out[%d][%d] = %g, want %g", typ, i, j, out[i*rows+j], s)
				}
			}
		}
	}
}

func TestMatMulPanicsOnBadShapes(t *testing.T) {
	for name, f := range map[string]func(){
		"short weights": func() { MatMul(quant.Q8_0, make([]byte, 33), 1, 32, make([]float32, 32), 1, make([]float32, 1), 1, 1) },
		"short x":       func() { MatMul(quant.Q8_0, make([]byte, 34), 1, 32, make([]float32, 31), 1, make([]float32, 1), 1, 1) },
		"small ldo":     func() { MatMul(quant.Q8_0, make([]byte, 68), 2, 32, make([]float32, 64), 2, make([]float32, 4), 1, 1) },
		"partial block": func() {
			MatMul(quant.Q4_K, make([]byte, 144), 1, 128, make([]float32, 128), 1, make([]float32, 1), 1, 1)
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestKernelsExtremeQ8: the largest products (weights -128 and 127 against activations +-127)
// neither saturate AVX2's 16-bit pair sums nor lose a bit, on every path.
func TestKernelsExtremeQ8(t *testing.T) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		const rows, cols, m = 4, 256, 2
		rb, _ := typ.RowBytes(cols)
		w := make([]byte, rows*rb)
		for j := range rows {
			for b := 0; b < rb; b += typ.BlockBytes() {
				binary.LittleEndian.PutUint16(w[j*rb+b:], quant.ToF16(1))
				for k := b + 2; k < b+typ.BlockBytes(); k++ {
					w[j*rb+k] = []byte{0x80, 0x7f, 0xff, 0x00}[j]
				}
			}
		}
		a := new(acts)
		a.shape(typ, m, cols)
		q := make([]int8, 32)
		for b := range m * a.nb {
			for k := range q {
				q[k] = int8(127 - 254*(b%3%2)) // +127 or -127 for the whole block
			}
			a.setBlock(typ, b, q, 1)
		}
		want := make([]float32, m*rows)
		goKernels.rows(typ, w, rb, rows, cols, a, m, want, rows)
		// Row 0 of the first activation row: 8 blocks, 5 at +127 and 3 at -127, against weights
		// -128 (Q8_0) or, for byte 0x80 in Q4_0, sixteen -8s and sixteen 0s per block.
		wantRow0 := map[quant.Type]float32{quant.Q8_0: -128 * 127 * 32 * 2, quant.Q4_0: -8 * 127 * 16 * 2}[typ]
		if want[0] != wantRow0 {
			t.Errorf("%s: portable path row 0 = %g, want %g", typ, want[0], wantRow0)
		}
		for _, k := range kernelSets() {
			got := make([]float32, m*rows)
			k.rows(typ, w, rb, rows, cols, a, m, got, rows)
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%s %s: out %d = %g, portable path %g", k.name, typ, i, got[i], want[i])
				}
			}
		}
	}
}

// TestQuantizeActsThreads: activations quantized on several goroutines are the ones a single
// goroutine makes, for every layout.
func TestQuantizeActsThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const m, cols = 17, 1536
	x := randomWeights(rng, m*cols)
	for _, typ := range quantTypes {
		one, many := new(acts), new(acts)
		one.quantize(typ, x, m, cols, 1)
		many.quantize(typ, x, m, cols, 3)
		if !slices.Equal(one.qs, many.qs) || !slices.Equal(one.d, many.d) || !slices.Equal(one.bias, many.bias) ||
			!slices.Equal(one.lane, many.lane) || !slices.Equal(one.sums, many.sums) {
			t.Errorf("%s: activations quantized on 3 goroutines differ from 1", typ)
		}
	}
}

// TestQuantizeActsKernels: each kernel set's activation quantizer gives the portable one's
// quants, scales and sums bit for bit, zero, NaN and infinite blocks included.
func TestQuantizeActsKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const m, cols = 5, 1024
	x := make([]float32, m*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * float32(math.Ldexp(1, rng.IntN(20)-10))
	}
	clear(x[256:512])                        // an all-zero block of every size
	x[600] = float32(math.NaN())             // a NaN block
	x[900] = float32(math.Inf(-1))           // an infinite block
	x[1100] = math.MaxFloat32                // finite, at the edge
	x[1300] = float32(math.Ldexp(0.5, -120)) // a subnormal among zeros
	clear(x[1280:1300])
	for _, typ := range quantTypes {
		want := new(acts)
		bs := want.shape(typ, m, cols)
		q := make([]int8, bs)
		for b := range m * want.nb {
			var d float32
			quantizeAct(x[b*bs:(b+1)*bs], q, &d)
			want.setBlock(typ, b, q, d)
		}
		for _, k := range kernelSets() {
			got := new(acts)
			saved := activeKernels
			activeKernels = k
			got.quantize(typ, x, m, cols, 2)
			activeKernels = saved
			same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b }
			if !slices.Equal(got.qs, want.qs) || !slices.EqualFunc(got.d, want.d, same) || !slices.Equal(got.bias, want.bias) ||
				!slices.Equal(got.lane, want.lane) || !slices.Equal(got.sums, want.sums) {
				t.Errorf("%s %s: quantized activations differ from the portable path's", k.name, typ)
			}
		}
	}
}
