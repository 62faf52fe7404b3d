// Package evex encodes the few AVX-512 instructions the kernels of package linear need that Go's
// assembler does not know (the AVX512_BF16 ones), so gen_kernels.go can emit them as BYTE
// directives. Only the register-register 512-bit forms without masking are encoded.
package evex

import "fmt"

// Opcodes in map 0F38 with the F3 prefix, the map and prefix of both BF16 instructions.
const (
	opDPBF16PS     = 0x52
	opCVTNEPS2BF16 = 0x72
)

// DPBF16PS encodes VDPBF16PS zmm(src2), zmm(src1), zmm(dst) in Go's operand order (AT&T order
// too): for each float32 lane i, dst[i] += src1.bf16[2i+1]·src2.bf16[2i+1] + src1.bf16[2i]·src2.bf16[2i].
func DPBF16PS(src2, src1, dst int) []byte { return encode(opDPBF16PS, dst, src1, src2) }

// CVTNEPS2BF16 encodes VCVTNEPS2BF16 zmm(src), ymm(dst): 16 float32 lanes rounded to the nearest
// even BF16.
func CVTNEPS2BF16(src, dst int) []byte {
	// The instruction has no second source: EVEX.vvvv is 1111, the encoding of register 0.
	return encode(opCVTNEPS2BF16, dst, 0, src)
}

// encode returns the EVEX.512.F3.0F38.W0 encoding of opcode op with ModRM.reg = reg, EVEX.vvvv =
// vvvv and ModRM.rm = rm, all vector registers 0-31.
func encode(op byte, reg, vvvv, rm int) []byte {
	for _, r := range []int{reg, vvvv, rm} {
		if r < 0 || r > 31 {
			panic(fmt.Sprintf("evex: register %d out of range", r))
		}
	}
	bit := func(r, n int) byte { return byte(r>>n) & 1 }
	// P0: R X B R' 0 0 m m, the register extension bits inverted; mm = 2 selects map 0F38.
	p0 := (1-bit(reg, 3))<<7 | (1-bit(rm, 4))<<6 | (1-bit(rm, 3))<<5 | (1-bit(reg, 4))<<4 | 2
	// P1: W vvvv 1 pp, vvvv inverted; W = 0, pp = 2 selects the F3 prefix.
	p1 := byte(^vvvv&15)<<3 | 1<<2 | 2
	// P2: z L'L b V' aaa; L'L = 2 selects 512 bits, V' the inverted fifth bit of vvvv.
	p2 := byte(2)<<5 | (1-bit(vvvv, 4))<<3
	modrm := byte(3)<<6 | byte(reg&7)<<3 | byte(rm&7)
	return []byte{0x62, p0, p1, p2, op, modrm}
}
