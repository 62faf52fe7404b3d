//go:build !purego

package sampling

import "golang.org/x/sys/cpu"

// haveVectorArgmax reports whether the AVX2 argmax kernels can run on this machine.
var haveVectorArgmax = cpu.X86.HasAVX2

// maxBlock is the number of logits maxAVX2 consumes per iteration.
const maxBlock = 32

// maxBlocks returns the largest non-NaN element of x (-Inf if none); len(x) is a multiple of
// maxBlock and at least one block.
func maxBlocks(x []float32) float32 { return maxAVX2(&x[0], len(x)) }

// findEqual returns the first index of x holding v, or -1; len(x) is a multiple of 8.
func findEqual(x []float32, v float32) int { return findEqAVX2(&x[0], len(x), v) }

// maxAVX2 returns the largest non-NaN element of p[:n] (-Inf if none); n is a positive multiple
// of 32.
//
//go:noescape
func maxAVX2(p *float32, n int) float32

// findEqAVX2 returns the first i < n with p[i] == v, or -1; n is a positive multiple of 8.
//
//go:noescape
func findEqAVX2(p *float32, n int, v float32) int
