//go:build !purego

package cpu

import "golang.org/x/sys/cpu"

// haveSIMD reports whether the AVX2/FMA attention kernels can run on this machine.
var haveSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotRows4Asm sets out[r] = Σ_{p<n} q[p]·k[r·ldk+p] for r < 4; n is a multiple of 8 and ldk is
// in elements. The caller guarantees every element read lies inside its slice.
//
//go:noescape
func dotRows4Asm(q *float32, k *float32, ldk int, n int, out *[4]float32)

// axpyRows4Asm adds Σ_{r<4} p[r]·v[r·ldv+j] to out[j] for j < n; n is a multiple of 8 and ldv
// is in elements. The caller guarantees every element touched lies inside its slice.
//
//go:noescape
func axpyRows4Asm(p *[4]float32, v *float32, ldv int, n int, out *float32)

// swiGLUAsm is swiGLU's loop over n elements (a multiple of 4) with AVX2, the same bits as the
// Go loop.
//
//go:noescape
func swiGLUAsm(gate *float32, up *float32, n int, c *expConsts)

// toHalfAsm rounds n float32 (a multiple of 8) to IEEE half floats as model.Float32ToHalf does,
// except for NaNs, which it only reports.
//
//go:noescape
func toHalfAsm(src *float32, dst *uint16, n int) (nan bool)

// expSumAsm sets s[i] = exp32((s[i]-m)·scale) for i < n (a multiple of 4) and lanes[l] to the
// float64 sum of s[l], s[l+4], s[l+8], ... in that order: the same bits as softmaxScaled's Go
// loop.
//
//go:noescape
func expSumAsm(s *float32, n int, m float32, scale float32, c *expConsts, lanes *[4]float64)

// maxAsm returns the largest of s[0:n] (n a multiple of 8, > 0), NaN if any is NaN: Go's max
// over them.
//
//go:noescape
func maxAsm(s *float32, n int) float32

// divAsm sets s[i] /= d for i < n (a multiple of 8): IEEE division, the Go loop's bits.
//
//go:noescape
func divAsm(s *float32, n int, d float32)

// prefetchAsm asks for the n bytes at p to be brought into cache.
//
//go:noescape
func prefetchAsm(p *uint16, n int)
