package linear

import (
	"encoding/binary"
	"fmt"
	"github.com/llmserve/llmserve/backend/cpu/quantmm"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// randomMatrix returns an n×k matrix of type t with values uniform in [-1, 1), and the same
// values (after rounding to t) as float64 for the reference.
func randomMatrix(rng *rand.Rand, t quant.Type, n, k int) (model.Matrix, []float64) {
	esize := 4
	if t != quant.F32 {
		esize = 2
	}
	data := make([]byte, n*k*esize)
	ref := make([]float64, n*k)
	for i := range ref {
		v := float32(2*rng.Float64() - 1)
		switch t {
		case quant.F32:
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			ref[i] = float64(v)
		case quant.BF16:
			h := model.Float32ToBF16(v)
			binary.LittleEndian.PutUint16(data[2*i:], h)
			ref[i] = float64(math.Float32frombits(uint32(h) << 16))
		case quant.F16:
			h := model.Float32ToHalf(v)
			binary.LittleEndian.PutUint16(data[2*i:], h)
			ref[i] = float64(model.HalfToFloat32(h))
		}
	}
	m, err := model.NewMatrix(t, n, k, data)
	if err != nil {
		panic(err)
	}
	return m, ref
}

// TestMatMulAllKernels checks every kernel set this machine runs (AVX-512 with and without BF16
// instructions, AVX2, portable Go), both paths (streaming and widened matrix product), every
// float type and both activation precisions (float32, and BF16 for BF16 weights) against a
// float64 reference, over shapes with ragged edges (heights not a multiple of 4, widths not a multiple
// of the lane count) and leading dimensions wider than the rows.
func TestMatMulAllKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ m, n, k int }{
		{1, 4, 16}, {1, 1, 1}, {1, 7, 33}, {1, 37, 64}, {1, 70, 1024}, {2, 64, 128}, {3, 5, 100}, {4, 8, 64}, {5, 13, 48},
		{8, 36, 1024}, {17, 20, 31}, {40, 9, 80}, {16, 12, 96}, {7, 8, 200}, {6, 16, 288},
	}
	if len(sets) < 2 && testing.Verbose() {
		t.Logf("only the portable kernels run on this machine")
	}
	for _, set := range sets {
		for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.F16} {
			for _, sh := range shapes {
				for _, cfg := range []struct {
					streamMax int
					bf16Acts  bool
				}{{0, false}, {1, false}, {0, true}, {1, true}} {
					streamMax := cfg.streamMax
					name := fmt.Sprintf("%s/%s/m%d_n%d_k%d/stream%d/bf16acts=%v", set.name, typ, sh.m, sh.n, sh.k, streamMax, cfg.bf16Acts)
					w, wref := randomMatrix(rng, typ, sh.n, sh.k)
					ldx, ldo := sh.k+3, sh.n+5
					x := make([]float32, sh.m*ldx)
					for i := range x {
						x[i] = float32(2*rng.Float64() - 1)
					}
					for _, acc := range []bool{false, true} {
						out := make([]float32, sh.m*ldo)
						for i := range out {
							out[i] = float32(i%7) - 3
						}
						before := append([]float32(nil), out...)
						mu := &Multiplier{Threads: 2, StreamMaxRows: streamMax, BF16Activations: cfg.bf16Acts, set: set}
						mu.MatMul(w, sh.m, x, ldx, out, ldo, acc)
						for i := range sh.m {
							for j := range ldo {
								got := out[i*ldo+j]
								if j >= sh.n {
									if got != before[i*ldo+j] {
										t.Fatalf("%s: wrote past column %d", name, sh.n)
									}
									continue
								}
								var want, mag float64
								for p := range sh.k {
									xv := float64(x[i*ldx+p])
									if typ == quant.BF16 && cfg.bf16Acts {
										// BF16 weights meet activations rounded to BF16.
										xv = float64(math.Float32frombits(uint32(model.Float32ToBF16(x[i*ldx+p])) << 16))
									}
									want += xv * wref[j*sh.k+p]
									mag += math.Abs(xv * wref[j*sh.k+p])
								}
								if acc {
									want += float64(before[i*ldo+j])
									mag += math.Abs(float64(before[i*ldo+j]))
								}
								if math.Abs(float64(got)-want) > 1e-6*(mag+1) {
									t.Fatalf("%s acc=%v: out[%d][%d] = %v, want %v", name, acc, i, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestWidenAllKernels checks each set's 16-bit widening against the scalar conversion on every
// bit pattern.
func TestWidenAllKernels(t *testing.T) {
	src := make([]byte, 2<<16)
	for i := range 1 << 16 {
		binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
	}
	for _, set := range sets {
		for _, typ := range []quant.Type{quant.BF16, quant.F16} {
			ti, _ := floatIndex(typ)
			got := make([]float32, 1<<16)
			set.widen[ti](&src[0], &got[0], 1<<16)
			for i, v := range got {
				var want float32
				if typ == quant.BF16 {
					want = math.Float32frombits(uint32(i) << 16)
				} else {
					want = model.HalfToFloat32(uint16(i))
				}
				if math.Float32bits(v) != math.Float32bits(want) && !(v != v && want != want) {
					t.Fatalf("%s %s: widen(%#04x) = %v, want %v", set.name, typ, i, v, want)
				}
			}
		}
	}
}

func TestMatMulRejects(t *testing.T) {
	if err := Supported(model.Matrix{Type: quant.Type(99), Rows: 1, Cols: 1}); err == nil {
		t.Error("an unknown type reported supported")
	}
	w, _ := randomMatrix(rand.New(rand.NewPCG(1, 1)), quant.BF16, 4, 16)
	defer func() {
		if recover() == nil {
			t.Error("short activation slice did not panic")
		}
	}()
	(&Multiplier{Threads: 1}).MatMul(w, 2, make([]float32, 20), 16, make([]float32, 8), 4, false)
}

// TestMatMulQuantized runs a Q8_0 matrix through MatMul with strided activations, both with and
// without accumulation, against the dequantized weights: quant's integer kernels quantize the
// activations to 8 bits per block, so the bound is that rounding (1% of the magnitude). It runs
// on the file layout and, where this machine has packed kernels, on the weights Prepack packed.
func TestMatMulQuantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 3, 20, 64
	vals := make([]float32, n*k)
	for i := range vals {
		vals[i] = float32(2*rng.Float64() - 1)
	}
	data, err := quant.Quantize(quant.Q8_0, vals, k)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.NewMatrix(quant.Q8_0, n, k, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Supported(w); err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, n*k)
	if err := quant.Dequantize(quant.Q8_0, data, deq); err != nil {
		t.Fatal(err)
	}
	ldx, ldo := k+5, n+2
	x := make([]float32, m*ldx)
	for i := range x {
		x[i] = float32(2*rng.Float64() - 1)
	}
	packed := &Multiplier{Threads: 2}
	if err := packed.Prepack(w); err != nil {
		t.Fatal(err)
	}
	if quantmm.Packs(w.Type) != (packed.PackedBytes() > 0) {
		t.Fatalf("Prepack packed %d bytes, quantmm.Packs says %v", packed.PackedBytes(), quantmm.Packs(w.Type))
	}
	for _, c := range []struct {
		mu  *Multiplier
		acc bool
	}{{&Multiplier{Threads: 2}, false}, {&Multiplier{Threads: 2}, true}, {packed, false}, {packed, true}} {
		acc := c.acc
		out := make([]float32, m*ldo)
		for i := range out {
			out[i] = 1
		}
		c.mu.MatMul(w, m, x, ldx, out, ldo, acc)
		for i := range m {
			for j := range n {
				var want, mag float64
				for p := range k {
					want += float64(x[i*ldx+p]) * float64(deq[j*k+p])
					mag += math.Abs(float64(x[i*ldx+p]) * float64(deq[j*k+p]))
				}
				if acc {
					want++
				}
				if got := float64(out[i*ldo+j]); math.Abs(got-want) > 0.01*mag {
					t.Fatalf("acc=%v out[%d][%d] = %v, want %v (±%v)", acc, i, j, got, want, 0.01*mag)
				}
			}
			if out[i*ldo+n] != 1 {
				t.Fatalf("wrote past column %d", n)
			}
		}
	}
}

// TestPrepackedRowsInvariant: with the weights packed, each activation row's results are the
// same bit for bit multiplied alone, in a batch (strided), through MatMul or MatMulRows, and
// accumulated onto zeros.
func TestPrepackedRowsInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const m, n, k = 37, 45, 256
	vals := make([]float32, n*k)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	data, err := quant.Quantize(quant.Q8_0, vals, k)
	if err != nil {
		t.Fatal(err)
	}
	w, err := model.NewMatrix(quant.Q8_0, n, k, data)
	if err != nil {
		t.Fatal(err)
	}
	mu := &Multiplier{Threads: 2}
	if err := mu.Prepack(w); err != nil {
		t.Fatal(err)
	}
	ldx := k + 3
	x := make([]float32, m*ldx)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	batch, rows, acc := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
	mu.MatMul(w, m, x, ldx, batch, n, false)
	mu.MatMulRows(w, m, x, ldx, rows, n, false)
	mu.MatMul(w, m, x, ldx, acc, n, true)
	for i := range m {
		one := make([]float32, n)
		mu.MatMul(w, 1, x[i*ldx:], ldx, one, n, false)
		for j := range n {
			for _, got := range []float32{batch[i*n+j], rows[i*n+j], acc[i*n+j]} {
				if math.Float32bits(got) != math.Float32bits(one[j]) {
					t.Fatalf("row %d out %d: alone %g, in a batch %g", i, j, one[j], got)
				}
			}
		}
	}
}

// TestRoundBF16 checks the activation rounding against the model package's float32 to BF16
// conversion (round to nearest even) on normal numbers, and each set's vector rounding against
// it on normals, denormals, zeros, infinities and NaNs.
func TestRoundBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var vals []float32
	for _, b := range []uint32{0, 0x80000000, 1, 0x807fffff, 0x007f8000, 0x00800000, 0x3f808000, 0x3f818000,
		0x3f80ffff, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffa00000} {
		vals = append(vals, math.Float32frombits(b))
	}
	for len(vals) < 1<<14 {
		vals = append(vals, math.Float32frombits(rng.Uint32()))
	}
	for _, v := range vals {
		b := math.Float32bits(v)
		got := roundBF16(v)
		switch {
		case b&0x7f800000 == 0:
			if got != uint16(b>>16)&0x8000 {
				t.Fatalf("roundBF16(%#08x) = %#04x, want a zero of its sign", b, got)
			}
		case v != v:
			if got&0x7fc0 != 0x7fc0 || got>>15 != uint16(b>>31) {
				t.Fatalf("roundBF16(%#08x) = %#04x, want a quiet NaN of its sign", b, got)
			}
		default:
			if want := model.Float32ToBF16(v); got != want {
				t.Fatalf("roundBF16(%#08x) = %#04x, want %#04x", b, got, want)
			}
		}
	}
	for _, set := range sets {
		if set.round != nil {
			xr := make([]float32, len(vals))
			set.round(&vals[0], &xr[0], len(vals))
			for i, v := range vals {
				if want := roundBF16(v); math.Float32bits(xr[i]) != uint32(want)<<16 {
					t.Fatalf("%s: %#08x rounds to %#08x, want %#04x", set.name, math.Float32bits(v), math.Float32bits(xr[i]), want)
				}
			}
		}
		if set.dp != nil {
			xb := make([]uint16, len(vals))
			set.dp.toBF16(&vals[0], &xb[0], len(vals))
			for i, v := range vals {
				if want := roundBF16(v); xb[i] != want {
					t.Fatalf("%s: %#08x rounds to BF16 %#04x, want %#04x", set.name, math.Float32bits(v), xb[i], want)
				}
			}
		}
	}
}

// TestMatMulRowsBatchInvariant: on every kernel set and float type, an activation row's
// products through MatMulRows are bit for bit the same alone and among 1..40 other rows, in any
// position, over shapes with ragged heights and widths (the row and tail kernels must sum as the
// 4x1 kernels do) and one wide enough that AVX-512's rows-multi passes take two rows each.
func TestMatMulRowsBatchInvariant(t *testing.T) {
	checkRowAloneAmong(t, rand.New(rand.NewPCG(5, 6)), []struct{ n, k int }{{70, 1024}, {37, 64}, {9, 100}, {64, 288}, {5, 7}, {12, 3072}},
		[]int{2, 3, 4, 5, 8, 17, 33, 41}, (*Multiplier).MatMulRows, nil)
}

// TestMatMulStableRowInvariant: on every kernel set and float type, an activation row's products
// through MatMulStable are bit for bit the same alone and among 1..70 other rows, in any
// position (the prompt rows of a chunk, however the prompt was cut), and close to MatMul's.
func TestMatMulStableRowInvariant(t *testing.T) {
	checkRowAloneAmong(t, rand.New(rand.NewPCG(9, 10)), []struct{ n, k int }{{70, 1024}, {37, 64}, {9, 100}, {300, 288}, {5, 7}},
		[]int{2, 3, 4, 5, 8, 17, 33, 41, 64, 71}, (*Multiplier).MatMulStable,
		func(name string, mu *Multiplier, w model.Matrix, m int, x, out []float32) {
			n, k := w.Rows, w.Cols
			ref := make([]float32, m*n)
			mu.MatMul(w, m, x, k, ref, n, false)
			for j := range ref {
				if d := math.Abs(float64(ref[j] - out[j])); d > 1e-4*(1+math.Abs(float64(ref[j]))) {
					t.Fatalf("%s m=%d: output %d is %v, MatMul gives %v", name, m, j, out[j], ref[j])
				}
			}
		})
}

// checkRowAloneAmong checks, on every kernel set, float type and shape, that a random activation
// row's products through mul are bit for bit the same alone and at a random position among m
// rows, for each m of counts; also, when set, runs also on each m-row product.
func checkRowAloneAmong(t *testing.T, rng *rand.Rand, shapes []struct{ n, k int }, counts []int,
	mul func(mu *Multiplier, w model.Matrix, m int, x []float32, ldx int, out []float32, ldo int, accumulate bool),
	also func(name string, mu *Multiplier, w model.Matrix, m int, x, out []float32)) {
	t.Helper()
	for _, set := range sets {
		for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.F16} {
			for _, sh := range shapes {
				name := fmt.Sprintf("%s/%s/n%d_k%d", set.name, typ, sh.n, sh.k)
				w, _ := randomMatrix(rng, typ, sh.n, sh.k)
				mu := &Multiplier{Threads: 2, set: set}
				row := make([]float32, sh.k)
				for i := range row {
					row[i] = float32(2*rng.Float64() - 1)
				}
				alone := make([]float32, sh.n)
				mul(mu, w, 1, row, sh.k, alone, sh.n, false)
				for _, m := range counts {
					x := make([]float32, m*sh.k)
					for i := range x {
						x[i] = float32(2*rng.Float64() - 1)
					}
					at := rng.IntN(m)
					copy(x[at*sh.k:], row)
					out := make([]float32, m*sh.n)
					mul(mu, w, m, x, sh.k, out, sh.n, false)
					for j, v := range out[at*sh.n : (at+1)*sh.n] {
						if math.Float32bits(v) != math.Float32bits(alone[j]) {
							t.Fatalf("%s: row %d of %d, output %d is %v, alone %v", name, at, m, j, v, alone[j])
						}
					}
					if also != nil {
						also(name, mu, w, m, x, out)
					}
				}
			}
		}
	}
}

// TestMultiKernelsMatchDot4x1 checks that every multi kernel's outputs equal dot4x1's bit for
// bit, for each weight type, activation row count, weight row count, and k (odd and even vector
// counts), on random inputs with strided rows: the batch invariance of MatMulRows rests on it.
func TestMultiKernelsMatchDot4x1(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	ran := false
	for _, set := range sets {
		for _, typ := range []quant.Type{quant.F32, quant.BF16, quant.F16} {
			ti, _ := floatIndex(typ)
			for _, mk := range set.multi[ti] {
				ran = true
				for _, vecs := range []int{1, 2, 3, 4, 7, 8, 33, 128} {
					k := vecs * set.lanes
					for _, rows := range []int{2, 4, 6, 8} {
						n := 4 * ((rows + 3) / 4) // dot4x1 takes rows in fours, the multi kernels in twos
						w, _ := randomMatrix(rng, typ, n, k+set.lanes)
						rb := w.RowBytes()
						ldx := k + 5
						x := make([]float32, mk.m*ldx)
						for i := range x {
							x[i] = float32(2*rng.Float64()-1) * float32(math.Pow(2, float64(rng.IntN(20)-10)))
						}
						out := make([]float32, rows*mk.m)
						mk.f(&w.Data[0], rb, rows, &x[0], 4*ldx, k, &out[0])
						var o4 [4]float32
						for j := 0; j < rows; j += 4 {
							for i := range mk.m {
								set.dot4x1[ti](&w.Data[j*rb], rb, &x[i*ldx], k, &o4)
								for r := 0; r < 4 && j+r < rows; r++ {
									got := out[mk.m*(j+r)+i]
									if math.Float32bits(got) != math.Float32bits(o4[r]) {
										t.Fatalf("%s/%s/multi%d k=%d rows=%d: out[%d][%d] = %v, dot4x1 %v", set.name, typ, mk.m, k, rows, j+r, i, got, o4[r])
									}
								}
							}
						}
					}
				}
			}
		}
	}
	if !ran {
		t.Skip("no multi kernels on this machine")
	}
}

// TestPairKernelsMatch checks that the pair-layout kernels agree bit for bit: every rows-multi
// kernel's outputs and the one-row kernel's equal pair1's, for each activation row count, weight
// row count and k (odd and even block counts), on random inputs with strided rows: the batch
// invariance of BF16 rows on the streaming path rests on it.
func TestPairKernelsMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	ran := false
	for _, set := range sets {
		if set.pair1 == nil {
			continue
		}
		for _, blocks := range []int{1, 2, 3, 7, 64, 65} {
			k := blocks * set.pairBlock
			for _, rows := range []int{1, 3, 4, 9} {
				w, _ := randomMatrix(rng, quant.BF16, 4*((rows+3)/4), k+8*(rows%2)) // rows ldw apart, wider than k but for 4
				rb := w.RowBytes()
				ldx := k + 16
				x := make([]float32, maxRowsMulti*ldx)
				for i := range x {
					x[i] = float32(2*rng.Float64()-1) * float32(math.Pow(2, float64(rng.IntN(20)-10)))
				}
				want := make([]float32, rows*maxRowsMulti) // want[maxRowsMulti·r+i]: pair1's result
				var o4 [4]float32
				for j := 0; j < rows; j += 4 {
					for i := range maxRowsMulti {
						set.pair1(&w.Data[j*rb], rb, &x[i*ldx], k, &o4)
						for r := 0; r < 4 && j+r < rows; r++ {
							want[maxRowsMulti*(j+r)+i] = o4[r]
						}
					}
				}
				check := func(kernel string, i, r int, got float32) {
					t.Helper()
					if math.Float32bits(got) != math.Float32bits(want[maxRowsMulti*r+i]) {
						t.Fatalf("%s/%s k=%d rows=%d: out[%d][%d] = %v, pair1 %v", set.name, kernel, k, rows, r, i, got, want[maxRowsMulti*r+i])
					}
				}
				if set.pairRows != nil && w.Cols == k {
					out := make([]float32, rows)
					set.pairRows(&w.Data[0], rows, &x[0], k, &out[0])
					for r, v := range out {
						check("pairRows", 0, r, v)
					}
				}
				for m, f := range set.pairRowsMulti {
					if f == nil {
						continue
					}
					ran = true
					out := make([]float32, rows*m)
					f(&w.Data[0], rb, rows, &x[0], 4*ldx, k, &out[0])
					for r := range rows {
						for i := range m {
							check(fmt.Sprintf("rows1x%d", m), i, r, out[m*r+i])
						}
					}
				}
			}
		}
	}
	if !ran {
		t.Skip("no pair rows-multi kernels on this machine")
	}
}

// TestStreamAllocations checks that the streaming path (few activation rows) allocates per
// call, not per task: its result buffers are the workers' own. Arrays declared in the task
// closure escaped to the heap, five allocations per 32 weight rows: about 3,700 per decode
// step of models/pico.
func TestStreamAllocations(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	w, _ := randomMatrix(rng, quant.BF16, 2048, 256)
	for _, set := range sets {
		for _, m := range []int{1, 3, 8} {
			x := make([]float32, m*256)
			out := make([]float32, m*2048)
			mu := &Multiplier{Threads: 2, set: set}
			mu.MatMulRows(w, m, x, 256, out, 2048, false) // grows the scratch
			// 64 tasks: a per-task allocation would show as 64 or more.
			if n := testing.AllocsPerRun(20, func() { mu.MatMulRows(w, m, x, 256, out, 2048, false) }); n > 8 {
				t.Errorf("%s, %d rows: %.0f allocations per product", set.name, m, n)
			}
		}
	}
}
