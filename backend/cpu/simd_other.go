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

func swiGLUAsm(gate *float32, up *float32, n int, c *expConsts) {
	panic("cpu: swiGLUAsm called without SIMD support")
}

func toHalfAsm(src *float32, dst *uint16, n int) (nan bool) {
	panic("cpu: toHalfAsm called without SIMD support")
}

func expSumAsm(s *float32, n int, m float32, scale float32, c *expConsts, lanes *[4]float64) {
	panic("cpu: expSumAsm called without SIMD support")
}

func maxAsm(s *float32, n int) float32 {
	panic("cpu: maxAsm called without SIMD support")
}

func divAsm(s *float32, n int, d float32) {
	panic("cpu: divAsm called without SIMD support")
}

func prefetchAsm(p *uint16, n int) {
	panic("cpu: prefetchAsm called without SIMD support")
}

func dotKeys4BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys4BF16Asm called without SIMD support")
}

func dotKeys2BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys2BF16Asm called without SIMD support")
}

func dotKeys1BF16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys1BF16Asm called without SIMD support")
}

func axpyKeys2BF16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: axpyKeys2BF16Asm called without SIMD support")
}

func axpyKeys1BF16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: axpyKeys1BF16Asm called without SIMD support")
}

func dotKeys4F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys4F16Asm called without SIMD support")
}

func dotKeys2F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys2F16Asm called without SIMD support")
}

func dotKeys1F16Asm(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: dotKeys1F16Asm called without SIMD support")
}

func axpyKeys2F16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: axpyKeys2F16Asm called without SIMD support")
}

func axpyKeys1F16Asm(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: axpyKeys1F16Asm called without SIMD support")
}

func axpyKeys3F32Asm(p *float32, ldp int, v *float32, ldv int, n int, cnt int, out *float32, ldo int) {
	panic("cpu: axpyKeys3F32Asm called without SIMD support")
}
