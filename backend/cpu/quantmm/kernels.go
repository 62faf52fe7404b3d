// Package quantmm multiplies float32 activations by weights in llama.cpp's block quantizations
// (and the float types) on the CPU: the activations are quantized to 8-bit blocks as llama.cpp
// does and each block's dot product runs in integers, with C kernels per instruction set (cgo,
// chosen from the CPU's features at run time) and a portable Go path. Weights can also be
// repacked once at load (Pack) into groups of rows whose blocks lie side by side, for
// multi-row kernels that give the portable path's results bit for bit. The formats themselves
// (types, block layouts, reference quantizers) are package quant's.
package quantmm

import (
	"encoding/binary"

	"github.com/llmserve/llmserve/quant"
)

// kernelSet is one implementation of the quantized dot products. rows computes rows weight rows
// (w, rowBytes apart) against m quantized activation rows: out[i*ldo+j].
type kernelSet struct {
	// name says which instructions it uses ("avx512vnni", "avxvnni", "avx2", "go").
	name string
	rows func(t quant.Type, w []byte, rowBytes, rows, cols int, a *acts, m int, out []float32, ldo int)
	// quantize, where not nil, quantizes activation blocks [b0, b1) of x into a (already shaped)
	// exactly as quantizeAct and setBlock do, and reports false, doing nothing, for a type it
	// leaves to them (an empty range only asks).
	quantize func(t quant.Type, x []float32, a *acts, b0, b1 int) bool
	// packed, where not nil, is the kernel for Packed weights (see pack.go), and packTypes the
	// types Pack packs for it: those where it measured faster than rows.
	packed    packedKernel
	packTypes []quant.Type
}

// goKernels is the portable path, and the reference the SIMD paths are tested against: each block's
// integer dot product is exact, then scaled in float32.
var goKernels = kernelSet{name: "go", rows: goRows, packed: goPacked, packTypes: []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K}}

// activeKernels is the fastest kernel set this CPU runs; tests and benchmarks switch it.
// The block layouts of package quant, by the short names the kernels use.
const (
	qk   = quant.QK
	qkK  = quant.QKK
	q4kD = quant.Q4KD
	q4kM = quant.Q4KM
	q4kS = quant.Q4KS
	q4kQ = quant.Q4KQ
	q6kL = quant.Q6KL
	q6kH = quant.Q6KH
	q6kS = quant.Q6KS
	q6kD = quant.Q6KD
)

// f16at reads the F16 at byte off of b.
func f16at(b []byte, off int) float32 { return quant.FromF16(binary.LittleEndian.Uint16(b[off:])) }

var activeKernels = bestKernels()

// Kernels names the kernel set MatMul uses on this machine.
func Kernels() string { return activeKernels.name }

func goRows(t quant.Type, w []byte, rowBytes, rows, cols int, a *acts, m int, out []float32, ldo int) {
	for j := range rows {
		wr := w[j*rowBytes : (j+1)*rowBytes]
		for i := range m {
			var s float32
			switch t {
			case quant.Q8_0:
				s = goDotQ8_0(wr, a, i)
			case quant.Q4_0:
				s = goDotQ4_0(wr, a, i)
			case quant.Q4_K:
				s = goDotQ4_K(wr, a, i)
			case quant.Q6_K:
				s = goDotQ6_K(wr, a, i)
			}
			out[i*ldo+j] = s
		}
	}
}

func goDotQ8_0(w []byte, a *acts, i int) float32 {
	var acc float32
	for b := range a.nb {
		blk := w[34*b : 34*b+34]
		aq := a.qs[(i*a.nb+b)*qk:][:qk]
		wq := (*[qk]byte)(blk[2:])
		var s0, s1 int32
		for k := 0; k < qk; k += 2 {
			s0 += int32(int8(wq[k])) * int32(aq[k])
			s1 += int32(int8(wq[k+1])) * int32(aq[k+1])
		}
		// The explicit conversion keeps Go from fusing the multiply-add (it may where FMA is
		// assumed, GOAMD64=v3), which the packed kernels, and results, rely on.
		acc += float32(float32(f16at(blk, 0)*a.d[i*a.nb+b]) * float32(s0+s1))
	}
	return acc
}

func goDotQ4_0(w []byte, a *acts, i int) float32 {
	var acc float32
	for b := range a.nb {
		blk := w[18*b : 18*b+18]
		aq := a.qs[(i*a.nb+b)*qk:][:qk]
		var s int32
		for k := range qk / 2 {
			s += (int32(blk[2+k]&0xf) - 8) * int32(aq[k])
			s += (int32(blk[2+k]>>4) - 8) * int32(aq[k+16])
		}
		acc += float32(f16at(blk, 0)*a.d[i*a.nb+b]) * float32(s)
	}
	return acc
}

func goDotQ4_K(w []byte, a *acts, i int) float32 {
	var acc float32
	for b := range a.nb {
		blk := w[144*b : 144*b+144]
		aq := a.qs[(i*a.nb+b)*qkK:][:qkK]
		sums := a.sums[(i*a.nb+b)*8:][:8]
		sc, q := blk[q4kS:q4kS+12], blk[q4kQ:]
		var isum, msum int32
		for slot, sub := range q4kOrder {
			s, m := quant.ScaleMinK4(sub, sc)
			g, shift := sub/2, uint(4*(sub%2))
			wq, av := (*[32]byte)(q[32*g:]), (*[32]int8)(aq[32*slot:])
			var d0, d1 int32
			for k := 0; k < 32; k += 2 {
				d0 += int32(wq[k]>>shift&0xf) * int32(av[k])
				d1 += int32(wq[k+1]>>shift&0xf) * int32(av[k+1])
			}
			dot := d0 + d1
			isum += int32(s) * dot
			msum += int32(m) * int32(sums[sub])
		}
		da := a.d[i*a.nb+b]
		acc += float32(float32(f16at(blk, q4kD)*da)*float32(isum)) - float32(float32(f16at(blk, q4kM)*da)*float32(msum))
	}
	return acc
}

func goDotQ6_K(w []byte, a *acts, i int) float32 {
	var acc float32
	for b := range a.nb {
		blk := w[210*b : 210*b+210]
		aq := a.qs[(i*a.nb+b)*qkK:][:qkK]
		sums := a.sums[(i*a.nb+b)*16:][:16]
		var isum int32
		for n := range 2 {
			ql, qh, sc := blk[q6kL+64*n:], blk[q6kH+32*n:], blk[q6kS+8*n:]
			an := aq[128*n:]
			var dots [8]int32
			for k := range 32 {
				is := k / 16
				q1 := int32(ql[k]&0xf | (qh[k]>>0&3)<<4)
				q2 := int32(ql[k+32]&0xf | (qh[k]>>2&3)<<4)
				q3 := int32(ql[k]>>4 | (qh[k]>>4&3)<<4)
				q4 := int32(ql[k+32]>>4 | (qh[k]>>6&3)<<4)
				dots[is] += q1 * int32(an[k])
				dots[is+2] += q2 * int32(an[k+32])
				dots[is+4] += q3 * int32(an[k+64])
				dots[is+6] += q4 * int32(an[k+96])
			}
			for g := range 8 {
				s := int32(int8(sc[g]))
				isum += s * (dots[g] - 32*int32(sums[8*n+g]))
			}
		}
		acc += float32(float32(f16at(blk, q6kD)*a.d[i*a.nb+b]) * float32(isum)) // unfused, as in goDotQ8_0
	}
	return acc
}
