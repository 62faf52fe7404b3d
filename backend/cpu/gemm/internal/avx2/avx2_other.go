//go:build !amd64 || purego

package avx2

func available() bool { return false }

// Dot4x3 is the AVX2 kernel's signature on platforms without it; see Available.
func Dot4x3(blocks int, a *float32, lda int, b *float32, ldb int, out *[12]float32) {
	panic("avx2.Dot4x3: AVX2 kernels are not available on this platform")
}

// Dot1x4 is the AVX2 kernel's signature on platforms without it; see Available.
func Dot1x4(blocks int, a *float32, b *float32, ldb int, out *[4]float32) {
	panic("avx2.Dot1x4: AVX2 kernels are not available on this platform")
}

// AddNN4x16 is the AVX2 kernel's signature on platforms without it; see Available.
func AddNN4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int) {
	panic("avx2.AddNN4x16: AVX2 kernels are not available on this platform")
}
