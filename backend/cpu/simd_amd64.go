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
