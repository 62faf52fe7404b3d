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

// dotRows4F16Asm is dotRows4Asm over keys stored as IEEE half floats (ldk in elements), widened
// in registers; the results are the same bits as widening the rows first and calling
// dotRows4Asm.
//
//go:noescape
func dotRows4F16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32)

// dotRows4BF16Asm is dotRows4F16Asm for bfloat16 keys.
//
//go:noescape
func dotRows4BF16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32)

// axpyRows4F16Asm is axpyRows4Asm over values stored as IEEE half floats, bit-identical to
// widening them first.
//
//go:noescape
func axpyRows4F16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32)

// axpyRows4BF16Asm is axpyRows4F16Asm for bfloat16 values.
//
//go:noescape
func axpyRows4BF16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32)

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

// dotRows4x2F16Asm is dotRows4F16Asm for two queries sharing the keys (out[0:4] for q0,
// out[4:8] for q1), each key widened once; the same bits as two one-query calls.
//
//go:noescape
func dotRows4x2F16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32)

// axpyRows4x2F16Asm is axpyRows4F16Asm for two queries sharing the values (weights p[0:4] into
// out0, p[4:8] into out1), each value widened once; the same bits as two one-query calls.
//
//go:noescape
func axpyRows4x2F16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32)

// dotRows4x2BF16Asm is dotRows4BF16Asm for two queries sharing the keys (out[0:4] for q0,
// out[4:8] for q1), each key widened once; the same bits as two one-query calls.
//
//go:noescape
func dotRows4x2BF16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32)

// axpyRows4x2BF16Asm is axpyRows4BF16Asm for two queries sharing the values (weights p[0:4] into
// out0, p[4:8] into out1), each value widened once; the same bits as two one-query calls.
//
//go:noescape
func axpyRows4x2BF16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32)

// expShiftedAsm sets s[i] = exp32((s[i]-m)·scale) for i < n (a multiple of 4), the same bits as
// the Go expression.
//
//go:noescape
func expShiftedAsm(s *float32, n int, m float32, scale float32, c *expConsts)

// maxAsm returns the largest of s[0:n] (n a multiple of 8, > 0), NaN if any is NaN: Go's max
// over them.
//
//go:noescape
func maxAsm(s *float32, n int) float32

// sum4Asm sets lanes[l] to the float64 sum of s[l], s[l+4], s[l+8], ... in that order, for the
// first n elements (a multiple of 4).
//
//go:noescape
func sum4Asm(s *float32, n int, lanes *[4]float64)

// divAsm sets s[i] /= d for i < n (a multiple of 8): IEEE division, the Go loop's bits.
//
//go:noescape
func divAsm(s *float32, n int, d float32)

// prefetchAsm asks for the n bytes at p to be brought into cache.
//
//go:noescape
func prefetchAsm(p *uint16, n int)
