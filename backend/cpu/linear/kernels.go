package linear

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// Indices of the float weight types in a kernelSet's tables.
const (
	idxF32 = iota
	idxBF16
	idxF16
	numFloatTypes
)

// floatIndex maps a float storage type to its table index; ok is false for other types.
func floatIndex(t quant.Type) (int, bool) {
	switch t {
	case quant.F32:
		return idxF32, true
	case quant.BF16:
		return idxBF16, true
	case quant.F16:
		return idxF16, true
	}
	return 0, false
}

// dot4x1Func sets out[r] = Σ_{p<k} w_r[p]·x[p] for the four weight rows starting at w, ldw bytes
// apart; k is a multiple of the set's lane count.
type dot4x1Func func(w *byte, ldw int, x *float32, k int, out *[4]float32)

// dot4x4Func sets out[4i+r] = Σ_{p<k} w_r[p]·x_i[p] for four weight rows (ldw bytes apart) and
// four activation rows (ldx bytes apart).
type dot4x4Func func(w *byte, ldw int, x *float32, ldx int, k int, out *[16]float32)

// widenFunc converts n 16-bit floats at src to float32 at dst; n is a multiple of the lane count.
type widenFunc func(src *byte, dst *float32, n int)

// kernelSet is one instruction set's kernels, indexed by floatIndex. A nil dot4x4 means the set
// runs four activation rows as four dot4x1 calls.
type kernelSet struct {
	name   string
	lanes  int
	dot4x1 [numFloatTypes]dot4x1Func
	dot4x4 [numFloatTypes]dot4x4Func
	// widen is nil at idxF32, which needs no conversion.
	widen [numFloatTypes]widenFunc
	// pair1 and pair4, where set, replace dot4x1 and dot4x4 for BF16 weights: they take
	// activations in pair layout (see pairLayout) with blocks of pairBlock, and k a multiple
	// of pairBlock.
	pair1     dot4x1Func
	pair4     dot4x4Func
	pairBlock int
	// pairRows, where set, handles one activation row against consecutive BF16 weight rows.
	pairRows rowsFunc
	// pairRowsMulti, where set, is indexed by an activation row count m (from 2): its kernel
	// runs m activation rows in pair layout against consecutive BF16 weight rows read one after
	// another, each result equal to pair1's bit for bit.
	pairRowsMulti []rowsMultiFunc
	// pairPassBytes, where set, bounds the activation rows of one pairRowsMulti pass (m·k·4
	// bytes): every weight row re-reads them all, and past what L1 holds beside the weights
	// streaming through, two narrower passes measured faster than one wide one.
	pairPassBytes int
	// rows, where set, handles one activation row (not in pair layout) against consecutive
	// weight rows.
	rows [numFloatTypes]rowsFunc
	// round, where set, rounds n floats (a multiple of lanes) to BF16 as roundBF16 does and
	// widens them back: the activations of BF16 weights outside the dp kernels.
	round func(src *float32, dst *float32, n int)
	// multi, where set, lists kernels that multiply weight rows by several activation rows
	// with results equal to dot4x1's bit for bit, most activation rows first.
	multi [numFloatTypes][]multiKernel
	// dp, where set, multiplies BF16 weights by BF16 activations on the streaming path (see
	// useDP).
	dp *dpKernels
}

// multiFunc sets out[m·r+i] = Σ_{p<k} w_r[p]·x_i[p] for rows weight rows (ldw bytes apart; rows
// even) and the kernel's m activation rows (ldx bytes apart), each sum formed exactly as dot4x1
// forms it; k is a multiple of the set's lane count.
type multiFunc func(w *byte, ldw int, rows int, x *float32, ldx int, k int, out *float32)

// rowsMultiFunc sets out[m·r+i] = Σ_{p<k} w_r[p]·x_i[p] for rows weight rows (ldw bytes apart),
// read one after another, and the kernel's m activation rows (ldx bytes apart); k is a multiple
// of the set's pairBlock.
type rowsMultiFunc func(w *byte, ldw int, rows int, x *float32, ldx int, k int, out *float32)

// multiKernel is a multiFunc and its number of activation rows.
type multiKernel struct {
	m int
	f multiFunc
}

// dpKernels are the BF16 dot-product kernels (VDPBF16PS) of a set: they take activation rows
// rounded to BF16 in natural order and k a multiple of dpBlock.
type dpKernels struct {
	dot4x1 func(w *byte, ldw int, x *uint16, k int, out *[4]float32)
	// dot4x4's ldx is the distance between activation rows in bytes.
	dot4x4 func(w *byte, ldw int, x *uint16, ldx int, k int, out *[16]float32)
	// toBF16 rounds n floats (a multiple of 16) to BF16 as roundBF16 does.
	toBF16 func(src *float32, dst *uint16, n int)
}

// useDP reports whether the set's dp kernels multiply weights of type index ti by m activation
// rows on the streaming path. One row (decode) keeps the pair kernels, which every set with dp
// kernels has: it is bound by the memory's read rate, and a one-row VDPBF16PS kernel read the
// weights a few percent slower than the pair one (single thread 24-26 GB/s against 25-27) and
// decoded slower end to end.
func (s *kernelSet) useDP(ti, m int) bool {
	return ti == idxBF16 && s.dp != nil && m > 1
}

// dpBlock is the number of elements the BF16 dot-product kernels take per step.
const dpBlock = 32

// roundBF16 rounds f to the nearest BF16 (ties to even), as VCVTNEPS2BF16 does: denormals become
// zeros of the same sign, NaNs stay NaNs (quieted), overflow goes to infinity.
func roundBF16(f float32) uint16 {
	b := math.Float32bits(f)
	switch {
	case b&0x7f800000 == 0:
		return uint16(b>>16) & 0x8000
	case b&0x7fffffff > 0x7f800000:
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// roundRowsGo writes the first k elements of each of m rows of x (stride ldx) to dst (stride k)
// rounded to BF16 and widened back to float32.
func roundRowsGo(dst, x []float32, m, ldx, k int) {
	for i := range m {
		d := dst[i*k : (i+1)*k]
		for p, v := range x[i*ldx : i*ldx+k] {
			d[p] = math.Float32frombits(uint32(roundBF16(v)) << 16)
		}
	}
}

// rowsFunc sets out[r] = Σ_{p<k} w_r[p]·x[p] for rows consecutive weight rows of k elements
// starting at w, reading them one after another; k is a multiple of the set's lane count (of
// the set's pairBlock for the pair kernels).
type rowsFunc func(w *byte, rows int, x *float32, k int, out *float32)

// pairLayout writes the first kp (a multiple of block) elements of each of m rows of x (stride
// ldx) to dst (stride kp) in pair layout: in every block (32 for AVX-512, 16 for AVX2), the
// even-indexed elements and then the odd-indexed ones. A BF16 weight load of one block then
// widens to its even and odd halves with a shift and a mask.
func pairLayout(dst, x []float32, m, ldx, kp, block int) {
	half := block / 2
	for i := range m {
		src := x[i*ldx : i*ldx+kp]
		d := dst[i*kp : (i+1)*kp]
		for b := 0; b < kp; b += block {
			s, o := src[b:b+block], d[b:b+block]
			for j := range half {
				o[j] = s[2*j]
				o[half+j] = s[2*j+1]
			}
		}
	}
}

// goKernels is the portable set: plain Go, any CPU, any build.
var goKernels = &kernelSet{
	name:  "go",
	lanes: 1,
	dot4x1: [numFloatTypes]dot4x1Func{
		idxF32:  func(w *byte, ldw int, x *float32, k int, out *[4]float32) { dot4x1Go(quant.F32, w, ldw, x, k, out) },
		idxBF16: func(w *byte, ldw int, x *float32, k int, out *[4]float32) { dot4x1Go(quant.BF16, w, ldw, x, k, out) },
		idxF16:  func(w *byte, ldw int, x *float32, k int, out *[4]float32) { dot4x1Go(quant.F16, w, ldw, x, k, out) },
	},
	widen: [numFloatTypes]widenFunc{
		idxBF16: func(src *byte, dst *float32, n int) { widenGo(quant.BF16, src, dst, n) },
		idxF16:  func(src *byte, dst *float32, n int) { widenGo(quant.F16, src, dst, n) },
	},
}

// widenGo converts n elements of type t (BF16 or F16) at src to float32 at dst.
func widenGo(t quant.Type, src *byte, dst *float32, n int) {
	s := unsafe.Slice(src, 2*n)
	d := unsafe.Slice(dst, n)
	if t == quant.BF16 {
		for i := range d {
			d[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(s[2*i:])) << 16)
		}
		return
	}
	for i := range d {
		d[i] = model.HalfToFloat32(binary.LittleEndian.Uint16(s[2*i:]))
	}
}

// goChunk is how many weights dot4x1Go widens onto the stack at a time.
const goChunk = 256

// dot4x1Go is the portable dot4x1: it widens each weight row a chunk at a time and accumulates
// with four partial sums, as the assembly does with vector lanes.
func dot4x1Go(t quant.Type, w *byte, ldw int, x *float32, k int, out *[4]float32) {
	xs := unsafe.Slice(x, k)
	esize := 4
	if t != quant.F32 {
		esize = 2
	}
	var buf [goChunk]float32
	for r := range 4 {
		row := unsafe.Add(unsafe.Pointer(w), r*ldw)
		var s0, s1, s2, s3 float32
		for p0 := 0; p0 < k; p0 += goChunk {
			n := min(goChunk, k-p0)
			src := (*byte)(unsafe.Add(row, p0*esize))
			var ws []float32
			if t == quant.F32 {
				ws = unsafe.Slice((*float32)(unsafe.Pointer(src)), n)
			} else {
				widenGo(t, src, &buf[0], n)
				ws = buf[:n]
			}
			xc := xs[p0 : p0+n]
			i := 0
			for ; i+4 <= n; i += 4 {
				s0 += ws[i] * xc[i]
				s1 += ws[i+1] * xc[i+1]
				s2 += ws[i+2] * xc[i+2]
				s3 += ws[i+3] * xc[i+3]
			}
			for ; i < n; i++ {
				s0 += ws[i] * xc[i]
			}
		}
		out[r] = (s0 + s1) + (s2 + s3)
	}
}
