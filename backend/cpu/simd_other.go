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
