//go:build !amd64 || purego

package cpu

// haveSIMD is false where the assembly kernels are not built; the portable loops run instead.
const haveSIMD = false

func dotRows4Asm(q *float32, k *float32, ldk int, n int, out *[4]float32) {
	panic("cpu: dotRows4Asm called without SIMD support")
}

func axpyRows4Asm(p *[4]float32, v *float32, ldv int, n int, out *float32) {
	panic("cpu: axpyRows4Asm called without SIMD support")
}

func dotRows4F16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32) {
	panic("cpu: dotRows4F16Asm called without SIMD support")
}

func dotRows4BF16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32) {
	panic("cpu: dotRows4BF16Asm called without SIMD support")
}

func axpyRows4F16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32) {
	panic("cpu: axpyRows4F16Asm called without SIMD support")
}

func axpyRows4BF16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32) {
	panic("cpu: axpyRows4BF16Asm called without SIMD support")
}

func swiGLUAsm(gate *float32, up *float32, n int, c *expConsts) {
	panic("cpu: swiGLUAsm called without SIMD support")
}

func toHalfAsm(src *float32, dst *uint16, n int) (nan bool) {
	panic("cpu: toHalfAsm called without SIMD support")
}

func dotRows4x2F16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32) {
	panic("cpu: dotRows4x2F16Asm called without SIMD support")
}

func axpyRows4x2F16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32) {
	panic("cpu: axpyRows4x2F16Asm called without SIMD support")
}

func dotRows4x2BF16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32) {
	panic("cpu: dotRows4x2BF16Asm called without SIMD support")
}

func axpyRows4x2BF16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32) {
	panic("cpu: axpyRows4x2BF16Asm called without SIMD support")
}

func expShiftedAsm(s *float32, n int, m float32, scale float32, c *expConsts) {
	panic("cpu: expShiftedAsm called without SIMD support")
}

func maxAsm(s *float32, n int) float32 {
	panic("cpu: maxAsm called without SIMD support")
}

func sum4Asm(s *float32, n int, lanes *[4]float64) {
	panic("cpu: sum4Asm called without SIMD support")
}

func divAsm(s *float32, n int, d float32) {
	panic("cpu: divAsm called without SIMD support")
}

func prefetchAsm(p *uint16, n int) {
	panic("cpu: prefetchAsm called without SIMD support")
}
