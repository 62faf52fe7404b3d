//go:build !purego

package avx2

import "golang.org/x/sys/cpu"

func available() bool { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }

// Dot4x3 sets out[r*3+c] = Σ_{p<8·blocks} a[r·lda+p]·b[c·ldb+p] for r < 4, c < 3, with lda and
// ldb in elements. The caller guarantees every element read lies inside its slice.
//
//go:noescape
func Dot4x3(blocks int, a *float32, lda int, b *float32, ldb int, out *[12]float32)

// Dot1x4 sets out[c] = Σ_{p<8·blocks} a[p]·b[c·ldb+p] for c < 4, with ldb in elements.
//
//go:noescape
func Dot1x4(blocks int, a *float32, b *float32, ldb int, out *[4]float32)

// AddNN4x16 adds A·B into C for a 4×16 block of C: c[r·ldc+j] += Σ_{p<k} a[r·lda+p]·b[p·ldb+j]
// for r < 4, j < 16, strides in elements. The caller guarantees every element touched lies
// inside its slice.
//
//go:noescape
func AddNN4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
