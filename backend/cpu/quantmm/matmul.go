package quantmm

import (
	"fmt"
	"github.com/llmserve/llmserve/quant"
	"math"
	"sync"

	"github.com/llmserve/llmserve/internal/parallel"
)

// MatMul sets out[i*ldo+j] = dot(x[i*cols:(i+1)*cols], row j of w) for i < m and j < rows, where
// w holds rows rows of t.RowBytes(cols) bytes each. For the block quantizations the activations
// are first quantized to 8 bits per element as llama.cpp does (per 32 elements for Q8_0 and Q4_0,
// per 256 for the K-quants) and the dot products run in integers; the float types are widened and
// summed in float32. Work is split over threads goroutines by weight rows.
//
// The result differs from the exact dot product of the dequantized weights with x by at most the
// activation quantization error, sum over blocks of (the block's activation step / 2) * (sum of
// |dequantized weights| in the block), plus float32 rounding; see the tests.
func MatMul(t quant.Type, w []byte, rows, cols int, x []float32, m int, out []float32, ldo int, threads int) {
	if err := checkMatMul(t, w, rows, cols, x, m, out, ldo); err != nil {
		panic(err)
	}
	if rows == 0 || m == 0 {
		return
	}
	rowBytes, _ := t.RowBytes(cols)
	var a *acts
	if t.Quantized() {
		a = getActs()
		defer putActs(a)
		a.quantize(t, x, m, cols, threads)
	}
	k := activeKernels
	run := func(r0, r1 int) {
		if r0 >= r1 {
			return
		}
		wr := w[r0*rowBytes : r1*rowBytes]
		o := out[r0:]
		switch t {
		case quant.F32, quant.F16, quant.BF16:
			floatRows(t, wr, r1-r0, cols, x, m, o, ldo)
		default:
			k.rows(t, wr, rowBytes, r1-r0, cols, a, m, o, ldo)
		}
	}
	threads = max(1, min(threads, rows/minRowsPerThread))
	if threads == 1 {
		run(0, rows)
		return
	}
	// More chunks than threads, claimed as threads come free, so one descheduled thread on a
	// busy machine does not hold up the rest; chunks are whole multiples of 16 rows, which keeps
	// every thread's output writes in their own cache lines.
	parts := min(4*threads, (rows+15)/16)
	per := ((rows+parts-1)/parts + 15) &^ 15
	parts = (rows + per - 1) / per
	parallel.For(parts, threads, func(_, c int) { run(c*per, min(rows, (c+1)*per)) })
}

// minRowsPerThread keeps tiny matrices on one goroutine, where starting others costs more than
// the work.
const minRowsPerThread = 16

func checkMatMul(t quant.Type, w []byte, rows, cols int, x []float32, m int, out []float32, ldo int) error {
	rowBytes, err := t.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("quantmm.MatMul: %w", err)
	}
	switch {
	case rows < 0 || m < 0:
		return fmt.Errorf("quantmm.MatMul: negative shape rows=%d m=%d", rows, m)
	case len(w) < rows*rowBytes:
		return fmt.Errorf("quantmm.MatMul: %d weight bytes, %d rows of %s x %d need %d", len(w), rows, t, cols, rows*rowBytes)
	case len(x) < m*cols:
		return fmt.Errorf("quantmm.MatMul: %d activations, need %d x %d", len(x), m, cols)
	case m > 0 && rows > 0 && (ldo < rows || len(out) < (m-1)*ldo+rows):
		return fmt.Errorf("quantmm.MatMul: output of %d with stride %d cannot hold %d x %d", len(out), ldo, m, rows)
	}
	return nil
}

// floatRows is the plain path for weights stored as floats (the engine's own BF16/F16 kernels
// live in backend/cpu; this keeps MatMul total over every Type).
func floatRows(t quant.Type, w []byte, rows, cols int, x []float32, m int, out []float32, ldo int) {
	rowBytes, _ := t.RowBytes(cols)
	buf := make([]float32, cols)
	for j := range rows {
		_ = quant.Dequantize(t, w[j*rowBytes:(j+1)*rowBytes], buf)
		for i := range m {
			xi := x[i*cols : (i+1)*cols]
			var s float32
			for k, v := range buf {
				s += v * xi[k]
			}
			out[i*ldo+j] = s
		}
	}
}

// acts holds m rows of activations quantized to 8 bits, laid out for one weight type's kernel.
type acts struct {
	// qs is the int8 quants, m rows of cols; for Q4_K each 256-element super-block is stored in
	// the order its nibbles come out of 64-byte loads (sub-blocks 0,2,1,3,4,6,5,7).
	qs []int8
	// d is each block's scale (per 32 elements for Q8_0/Q4_0, per 256 for the K-quants).
	d []float32
	// bias holds, for Q8_0/Q4_0, eight int32 per block: the first is the block's correction
	// -off*sum(qs) (off 128 for Q8_0's sign-offset trick, 8 for Q4_0's stored offset), the rest 0.
	bias []int32
	// lane holds, for Q8_0, -16*sum(qs) per block: the 512-bit kernel starts each of a block's
	// 8 int32 lanes with it, which adds the block's -128*sum(qs).
	lane []int32
	// sums is the K-quants' sums of qs: per 32 elements for Q4_K, per 16 for Q6_K.
	sums []int16
	// nb is the number of blocks in one row.
	nb int
}

var actsPool = sync.Pool{New: func() any { return new(acts) }}

func getActs() *acts  { return actsPool.Get().(*acts) }
func putActs(a *acts) { actsPool.Put(a) }

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// quantize fills a with x's m rows quantized for weights of type t, on up to threads
// goroutines: at 16 rows it is a sixth of a Q4_K multiply's work, too much to leave serial.
func (a *acts) quantize(t quant.Type, x []float32, m, cols, threads int) {
	bs := a.shape(t, m, cols)
	n := m * a.nb
	k := activeKernels
	// An empty range asks whether the kernel set quantizes type t itself.
	simd := k.quantize != nil && k.quantize(t, x, a, 0, 0)
	// Blocks are independent, so the split does not change any result.
	chunk := quantChunk
	if simd {
		chunk = quantChunkSIMD
	}
	per := max(1, chunk/bs)
	parts := (n + per - 1) / per
	parallel.For(parts, threads, func(_, c int) {
		b0, b1 := c*per, min(n, (c+1)*per)
		if simd {
			k.quantize(t, x, a, b0, b1)
			return
		}
		var tmp [qkK]int8
		for b := b0; b < b1; b++ {
			var d float32
			quantizeAct(x[b*bs:(b+1)*bs], tmp[:bs], &d)
			a.setBlock(t, b, tmp[:bs], d)
		}
	})
}

// quantChunk and quantChunkSIMD are the fewest activations one goroutine quantizes in Go and
// with a SIMD quantizer (a few microseconds of work; the SIMD one does 4096 in about one),
// below which handing work to another goroutine costs more than it saves.
const (
	quantChunk     = 4096
	quantChunkSIMD = 65536
)

// shape sizes a for m rows of cols activations against weights of type t and returns the block
// size.
func (a *acts) shape(t quant.Type, m, cols int) int {
	bs := qk
	if t == quant.Q4_K || t == quant.Q6_K {
		bs = qkK
	}
	a.nb = cols / bs
	a.qs = grow(a.qs, m*cols)
	a.d = grow(a.d, m*a.nb)
	switch t {
	case quant.Q8_0, quant.Q4_0:
		a.bias = grow(a.bias, 8*m*a.nb)
		if t == quant.Q8_0 {
			a.lane = grow(a.lane, m*a.nb)
		}
	case quant.Q4_K:
		a.sums = grow(a.sums, 8*m*a.nb)
	case quant.Q6_K:
		a.sums = grow(a.sums, 16*m*a.nb)
	}
	return bs
}

// setBlock stores block b (counted over all rows) from its quants q, in natural order, and scale.
func (a *acts) setBlock(t quant.Type, b int, q []int8, d float32) {
	a.d[b] = d
	switch t {
	case quant.Q8_0, quant.Q4_0:
		off := int32(128)
		if t == quant.Q4_0 {
			off = 8
		}
		var s int32
		for _, v := range q {
			s += int32(v)
		}
		copy(a.qs[b*qk:], q)
		bb := a.bias[8*b : 8*b+8]
		clear(bb)
		bb[0] = -off * s
		if t == quant.Q8_0 {
			a.lane[b] = -16 * s
		}
	case quant.Q4_K, quant.Q6_K:
		per := 8
		if t == quant.Q6_K {
			per = 16
		}
		n := qkK / per
		for k := range per {
			var s int32
			for _, v := range q[k*n : (k+1)*n] {
				s += int32(v)
			}
			a.sums[b*per+k] = int16(s)
		}
		dst := a.qs[b*qkK : (b+1)*qkK]
		if t == quant.Q6_K {
			copy(dst, q)
			return
		}
		for k, sub := range q4kOrder {
			copy(dst[32*k:32*k+32], q[32*sub:32*sub+32])
		}
	}
}

// q4kOrder is the sub-block stored at each 32-element slot of a Q4_K activation super-block: a
// 64-byte load of nibbles holds sub-blocks (0, 2) in its low nibbles and (1, 3) in its high ones.
var q4kOrder = [8]int{0, 2, 1, 3, 4, 6, 5, 7}

// quantizeAct quantizes x symmetrically to q in [-127, 127] with scale *d = max|x|/127. Non-finite inputs give a NaN scale, so they show in the output.
func quantizeAct(x []float32, q []int8, d *float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	*d = amax / 127
	if amax == 0 || amax != amax || amax > math.MaxFloat32 {
		clear(q)
		if amax != 0 {
			*d = float32(math.NaN())
		}
		return
	}
	id := 127 / amax
	for i, v := range x {
		q[i] = int8(quant.NearestInt(v * id))
	}
}

// abs32 is |v| (the sign bit cleared).
func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }
