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
func swiGLUAsm(gate *float32, up *float32, n int, c *swiGLUConsts)

// toHalfAsm rounds n float32 (a multiple of 8) to IEEE half floats as model.Float32ToHalf does,
// except for NaNs, which it only reports.
//
//go:noescape
func toHalfAsm(src *float32, dst *uint16, n int) (nan bool)
