//go:build cgo && amd64

package quantmm

/*
#cgo CFLAGS: -O3
#include <stdint.h>

#define DECL(isa) \
void q8_0_##isa(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, const float *ad, const int32_t *ax, int64_t epb, int m, float *out, int64_t ldo); \
void q4_0_##isa(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, const float *ad, const int32_t *ax, int64_t epb, int m, float *out, int64_t ldo); \
void q4_k_##isa(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, const float *ad, const int16_t *ax, int64_t epb, int m, float *out, int64_t ldo); \
void q6_k_##isa(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, const float *ad, const int16_t *ax, int64_t epb, int m, float *out, int64_t ldo);
void q8_0_vnni512(const uint8_t *w, int64_t rb, int rows, int nb, const int8_t *aq, const float *ad, const int32_t *alane, int m, float *out, int64_t ldo);
void qa_q4k(const float *x, int64_t nblk, int8_t *qs, float *d, int16_t *sums);
void qa_q4k_avx2(const float *x, int64_t nblk, int8_t *qs, float *d, int16_t *sums);
void qa_q32_avx2(const float *x, int64_t nblk, int8_t *qs, float *d, int32_t *bias, int32_t *lane, int32_t off);
void qa_q32(const float *x, int64_t nblk, int8_t *qs, float *d, int32_t *bias, int32_t *lane, int32_t off);
void q8_0_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad, int n, float *out, int64_t ldo);
void q6_k_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad, const int16_t *asums, int n, float *out, int64_t ldo);
void q4_k_packed_avx2(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad, const int16_t *asums, int n, float *out, int64_t ldo);
void q4_k_packed_vnni256(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad, const int16_t *asums, int n, float *out, int64_t ldo);
void q4_k_packed_vnni512(const uint8_t *p, int rows, int nb, int g0, int g1, const int8_t *aq, const float *ad, const int16_t *asums, int n, float *out, int64_t ldo);
DECL(avx2)
DECL(avxvnni)
DECL(vnni256)
*/
import "C"

import (
	"github.com/llmserve/llmserve/quant"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// cKernels is the C entry points of one instruction set.
type cKernels struct {
	q8_0, q4_0 func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t)
	q4_k, q6_k func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t)
	// wide512 selects the 512-bit tiled Q8_0 kernel, which takes the activations' lane biases
	// instead of their bias rows.
	wide512 bool
}

func (k *cKernels) rows(t quant.Type, w []byte, rowBytes, rows, cols int, a *acts, m int, out []float32, ldo int) {
	wp := (*C.uint8_t)(unsafe.Pointer(&w[0]))
	aq := (*C.int8_t)(unsafe.Pointer(&a.qs[0]))
	ad := (*C.float)(unsafe.Pointer(&a.d[0]))
	op := (*C.float)(unsafe.Pointer(&out[0]))
	rb, r, nb, mm, lo := C.int64_t(rowBytes), C.int(rows), C.int(a.nb), C.int(m), C.int64_t(ldo)
	switch t {
	case quant.Q8_0:
		if k.wide512 {
			C.q8_0_vnni512(wp, rb, r, nb, aq, ad, (*C.int32_t)(unsafe.Pointer(&a.lane[0])), mm, op, lo)
			return
		}
		k.q8_0(wp, rb, r, nb, aq, ad, (*C.int32_t)(unsafe.Pointer(&a.bias[0])), 8, mm, op, lo)
	case quant.Q4_0:
		k.q4_0(wp, rb, r, nb, aq, ad, (*C.int32_t)(unsafe.Pointer(&a.bias[0])), 8, mm, op, lo)
	case quant.Q4_K:
		k.q4_k(wp, rb, r, nb, aq, ad, (*C.int16_t)(unsafe.Pointer(&a.sums[0])), 8, mm, op, lo)
	case quant.Q6_K:
		k.q6_k(wp, rb, r, nb, aq, ad, (*C.int16_t)(unsafe.Pointer(&a.sums[0])), 16, mm, op, lo)
	}
}

func cSet(name string, k *cKernels) kernelSet { return kernelSet{name: name, rows: k.rows} }

// packedAVX2 runs the AVX2 kernels of the packed layouts (pack.go).
func packedAVX2(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int) {
	if g0 >= g1 || n == 0 {
		return
	}
	pp, rows, nb, cg0, cg1 := (*C.uint8_t)(unsafe.Pointer(&p.data[0])), C.int(p.rows), C.int(a.nb), C.int(g0), C.int(g1)
	ad, op := (*C.float)(unsafe.Pointer(&a.d[i0*a.nb])), (*C.float)(unsafe.Pointer(&out[0]))
	switch p.t {
	case quant.Q8_0:
		C.q8_0_packed_avx2(pp, rows, nb, cg0, cg1, (*C.int8_t)(unsafe.Pointer(&a.qs[i0*a.nb*qk])), ad, C.int(n), op, C.int64_t(ldo))
	case quant.Q4_K:
		C.q4_k_packed_avx2(pp, rows, nb, cg0, cg1, (*C.int8_t)(unsafe.Pointer(&a.qs[i0*a.nb*qkK])), ad,
			(*C.int16_t)(unsafe.Pointer(&a.sums[i0*a.nb*8])), C.int(n), op, C.int64_t(ldo))
	case quant.Q6_K:
		C.q6_k_packed_avx2(pp, rows, nb, cg0, cg1, (*C.int8_t)(unsafe.Pointer(&a.qs[i0*a.nb*qkK])), ad,
			(*C.int16_t)(unsafe.Pointer(&a.sums[i0*a.nb*16])), C.int(n), op, C.int64_t(ldo))
	default:
		panic("quantmm: no packed AVX2 kernel for " + p.t.String())
	}
}

// packedVNNI512 is the AVX-512 VNNI set's packed kernel: Q4_K on two or more activation rows
// through q4_k_packed_vnni512 (vpdpbusd; 512-bit from 16 rows), the rest through AVX2's. All
// give the same bits. On Zen 5: on one row (decode at batch 1, read-bound) AVX2's tile read
// 3-7% faster; on 16 rows the 256-bit VNNI tile took 10-20% less CPU time than AVX2's, and the
// 512-bit tile 20-28% less than the 256-bit one.
func packedVNNI512(p *Packed, a *acts, i0, n, g0, g1 int, out []float32, ldo int) {
	if p.t != quant.Q4_K || n < 2 {
		packedAVX2(p, a, i0, n, g0, g1, out, ldo)
		return
	}
	if g0 >= g1 {
		return
	}
	pp, rows, nb, cg0, cg1 := (*C.uint8_t)(unsafe.Pointer(&p.data[0])), C.int(p.rows), C.int(a.nb), C.int(g0), C.int(g1)
	ad, op := (*C.float)(unsafe.Pointer(&a.d[i0*a.nb])), (*C.float)(unsafe.Pointer(&out[0]))
	aq, as := (*C.int8_t)(unsafe.Pointer(&a.qs[i0*a.nb*qkK])), (*C.int16_t)(unsafe.Pointer(&a.sums[i0*a.nb*8]))
	C.q4_k_packed_vnni512(pp, rows, nb, cg0, cg1, aq, ad, as, C.int(n), op, C.int64_t(ldo))
}

func withQuantize(q func(quant.Type, []float32, *acts, int, int) bool, k kernelSet) kernelSet {
	k.quantize = q
	return k
}

func withPacked(p packedKernel, k kernelSet, types ...quant.Type) kernelSet {
	k.packed, k.packTypes = p, types
	return k
}

// quantize512 is the AVX-512 activation quantizer for the types whose layout it knows.
func quantize512(t quant.Type, x []float32, a *acts, b0, b1 int) bool {
	return quantizeC(t, x, a, b0, b1, true)
}

// quantizeAVX2 is quantize512 with AVX2.
func quantizeAVX2(t quant.Type, x []float32, a *acts, b0, b1 int) bool {
	return quantizeC(t, x, a, b0, b1, false)
}

func quantizeC(t quant.Type, x []float32, a *acts, b0, b1 int, avx512 bool) bool {
	if t != quant.Q4_K && t != quant.Q8_0 && t != quant.Q4_0 {
		return false
	}
	if b1 <= b0 {
		return true
	}
	n := C.int64_t(b1 - b0)
	switch t {
	case quant.Q4_K:
		xp, qp := (*C.float)(unsafe.Pointer(&x[b0*qkK])), (*C.int8_t)(unsafe.Pointer(&a.qs[b0*qkK]))
		dp, sp := (*C.float)(unsafe.Pointer(&a.d[b0])), (*C.int16_t)(unsafe.Pointer(&a.sums[b0*8]))
		if avx512 {
			C.qa_q4k(xp, n, qp, dp, sp)
		} else {
			C.qa_q4k_avx2(xp, n, qp, dp, sp)
		}
	case quant.Q8_0, quant.Q4_0:
		var lane *C.int32_t
		off := C.int32_t(8)
		if t == quant.Q8_0 {
			lane, off = (*C.int32_t)(unsafe.Pointer(&a.lane[b0])), 128
		}
		xp, qp := (*C.float)(unsafe.Pointer(&x[b0*qk])), (*C.int8_t)(unsafe.Pointer(&a.qs[b0*qk]))
		dp, bp := (*C.float)(unsafe.Pointer(&a.d[b0])), (*C.int32_t)(unsafe.Pointer(&a.bias[b0*8]))
		if avx512 {
			C.qa_q32(xp, n, qp, dp, bp, lane, off)
		} else {
			C.qa_q32_avx2(xp, n, qp, dp, bp, lane, off)
		}
	}
	return true
}

var (
	avx2Kernels = withPacked(packedAVX2, withQuantize(quantizeAVX2, cSet("avx2", &cKernels{
		q8_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q8_0_avx2(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_0_avx2(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_k_avx2(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q6_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q6_k_avx2(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		// Not Q6_K: rebuilding its six-bit quants from the interleaved nibbles and high bits
		// costs more than the rows save (BenchmarkMatMulDecode16/q6_k, CPU time: 3.2 ms packed,
		// 2.7 ms by rows; at one row 0.49 vs 0.28 ms), so its packed kernel is only tested.
	})), quant.Q8_0, quant.Q4_K)
	avxvnniKernels = withQuantize(quantizeAVX2, cSet("avxvnni", &cKernels{
		q8_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q8_0_avxvnni(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_0_avxvnni(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_k_avxvnni(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q6_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q6_k_avxvnni(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
	}))
	// Q4_K runs packed where the AVX-512 set is chosen (packedVNNI512): on Zen 5 even the AVX2
	// packed kernel outran the 512-bit row kernel at every row count (BenchmarkMatMul*/q4_k,
	// Qwen3-0.6B shapes, MB/s or GMAC/s: 1 row 20.5-28.8 -> 22.6-33.0 GB/s, 16 rows 136-153 ->
	// 150-177 GMAC/s, 512 rows 117-130 -> 170-182), while Q8_0's 512-bit tile outran the packed
	// one at every count.
	avx512Kernels = withPacked(packedVNNI512, withQuantize(quantize512, cSet("avx512vnni", &cKernels{
		q8_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q8_0_vnni256(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_0: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int32_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_0_vnni256(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q4_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q4_k_vnni256(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		q6_k: func(w *C.uint8_t, rb C.int64_t, rows, nb C.int, aq *C.int8_t, ad *C.float, ax *C.int16_t, epb C.int64_t, m C.int, out *C.float, ldo C.int64_t) {
			C.q6_k_vnni256(w, rb, rows, nb, aq, ad, ax, epb, m, out, ldo)
		},
		wide512: true,
	})), quant.Q4_K)
)

var (
	hasAVX2    = cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVXVNNI = hasAVX2 && cpu.X86.HasAVXVNNI
	hasAVX512  = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI
)

// kernelSets lists the kernel sets this machine can run, best first.
func kernelSets() []kernelSet {
	var s []kernelSet
	if hasAVX512 {
		s = append(s, avx512Kernels)
	}
	if hasAVXVNNI {
		s = append(s, avxvnniKernels)
	}
	if hasAVX2 {
		s = append(s, avx2Kernels)
	}
	return append(s, goKernels)
}

func bestKernels() kernelSet { return kernelSets()[0] }
