//go:build !purego

#include "textflag.h"

// func dotRows4Asm(q *float32, k *float32, ldk int, n int, out *[4]float32)
TEXT ·dotRows4Asm(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ ldk+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $2, R8              // row stride in bytes
	LEAQ (R8)(R8*2), R9      // 3 rows
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX              // blocks of 8 floats
	JZ   reduce

loop:
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (DI)(R8*1), Y4, Y1
	VFMADD231PS (DI)(R8*2), Y4, Y2
	VFMADD231PS (DI)(R9*1), Y4, Y3
	ADDQ        $32, SI
	ADDQ        $32, DI
	DECQ        CX
	JNZ         loop

reduce:
	// Pairwise horizontal sums leave row r's total split over lane r of each 128-bit half.
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	VZEROUPPER
	RET

// func axpyRows4Asm(p *[4]float32, v *float32, ldv int, n int, out *float32)
TEXT ·axpyRows4Asm(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ ldv+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	VBROADCASTSS (SI), Y4
	VBROADCASTSS 4(SI), Y5
	VBROADCASTSS 8(SI), Y6
	VBROADCASTSS 12(SI), Y7
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS     (DX), Y0
	VMULPS      (DI)(R8*1), Y5, Y1
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (DI)(R9*1), Y7, Y1
	VFMADD231PS (DI)(R8*2), Y6, Y0
	VADDPS      Y1, Y0, Y0
	VMOVUPS     Y0, (DX)
	ADDQ        $32, DI
	ADDQ        $32, DX
	DECQ        CX
	JNZ         loop

done:
	VZEROUPPER
	RET

// The half-precision variants below read 16-bit cache rows and widen them in registers
// (VCVTPH2PS for F16; a zero-extend and 16-bit shift for BF16). Widening is exact, and each
// product and sum is formed in the same order as in the float32 kernels above, so the results
// are bit-identical to widening the rows first and running those.

// EXP32(x, xd, xdx, n, r, p, px) sets px to exp32 of the four float32 in x, each operation the
// one exp32 does, in its order, so the results are the same bits: x = n·ln2 + r with
// n = floor(x·log2e + 1/2) (VROUNDPD $1 is floor), p the degree-7 polynomial in r by Horner's
// rule in fused multiply-adds, e = float32(p·2^n). 2^n is n + 1023 in the exponent field: added
// to 1.5·2^52 (exactly, n being a small integer) the sum's low mantissa bits are n + 1023, which
// the shift moves into place. Then exp32's edge cases: x > 88.8 gives +Inf, x < -104 gives 0
// (past them n + 1023 may leave 0..2047, and the result is replaced), NaN gives x. xd (xdx its
// X form), n, r and p (px) are scratch; the constants are read from the expConsts at R10.
#define EXP32(x, xd, xdx, n, r, p, px) \
	VCVTPS2PD   x, xd \
	VMULPD      0(R10), xd, n \
	VADDPD      32(R10), n, n \
	VROUNDPD    $1, n, n \
	VMULPD      64(R10), n, r \
	VSUBPD      r, xd, r \
	VMOVUPD     96(R10), p \
	VFMADD213PD 128(R10), r, p \
	VFMADD213PD 160(R10), r, p \
	VFMADD213PD 192(R10), r, p \
	VFMADD213PD 224(R10), r, p \
	VFMADD213PD 256(R10), r, p \
	VFMADD213PD 288(R10), r, p \
	VFMADD213PD 288(R10), r, p \
	VADDPD      320(R10), n, n \
	VPSLLQ      $52, n, n \
	VMULPD      n, p, p \
	VCVTPD2PSY  p, px \
	VCMPPS      $0x1e, 368(R10), x, xdx \
	VBLENDVPS   xdx, 400(R10), px, px \
	VCMPPS      $0x11, 384(R10), x, xdx \
	VANDNPS     px, xdx, px \
	VCMPPS      $3, x, x, xdx \
	VBLENDVPS   xdx, x, px, px

// func swiGLUAsm(gate *float32, up *float32, n int, c *expConsts)
//
// gate[i] = float32(float64(g) / (1 + float64(exp32(-g)))) · up[i], four lanes at a time, the
// same bits as swiGLU's Go loop.
TEXT ·swiGLUAsm(SB), NOSPLIT, $0-32
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R10
	SHRQ $2, CX
	JZ   swigluDone

swigluLoop:
	VMOVUPS     (SI), X0          // g
	VXORPS      352(R10), X0, X1  // x = -g (sign flip)
	EXP32(X1, Y2, X2, Y3, Y4, Y5, X5)
	VCVTPS2PD   X5, Y5
	VADDPD      288(R10), Y5, Y5  // 1 + e
	VCVTPS2PD   X0, Y2
	VDIVPD      Y5, Y2, Y2        // g / (1 + e)
	VCVTPD2PSY  Y2, X2
	VMULPS      (DI), X2, X2
	VMOVUPS     X2, (SI)
	ADDQ        $16, SI
	ADDQ        $16, DI
	DECQ        CX
	JNZ         swigluLoop

swigluDone:
	VZEROUPPER
	RET

// func expSumAsm(s *float32, n int, m float32, scale float32, c *expConsts, lanes *[4]float64)
//
// s[i] = exp32((s[i] - m) · scale) for i < n (a multiple of 4), and lanes[l] = the sum of
// float64(s[i]) over i ≡ l (mod 4), in order: the same bits as softmaxScaled's Go loop. Eight
// at a time (two independent exponentials), then four.
TEXT ·expSumAsm(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), X0
	VBROADCASTSS scale+20(FP), X14
	MOVQ c+24(FP), R10
	MOVQ lanes+32(FP), DI
	VXORPD Y12, Y12, Y12
	CMPQ CX, $8
	JLT  expSumFour

expSumEight:
	VMOVUPS   (SI), X1
	VMOVUPS   16(SI), X7
	VSUBPS    X0, X1, X1
	VSUBPS    X0, X7, X7
	VMULPS    X14, X1, X1
	VMULPS    X14, X7, X7
	EXP32(X1, Y2, X2, Y3, Y4, Y5, X5)
	EXP32(X7, Y8, X8, Y9, Y10, Y11, X11)
	VMOVUPS   X5, (SI)
	VMOVUPS   X11, 16(SI)
	VCVTPS2PD X5, Y5
	VADDPD    Y5, Y12, Y12
	VCVTPS2PD X11, Y11
	VADDPD    Y11, Y12, Y12
	ADDQ      $32, SI
	SUBQ      $8, CX
	CMPQ      CX, $8
	JGE       expSumEight

expSumFour:
	CMPQ      CX, $4
	JLT       expSumDone
	VMOVUPS   (SI), X1
	VSUBPS    X0, X1, X1
	VMULPS    X14, X1, X1
	EXP32(X1, Y2, X2, Y3, Y4, Y5, X5)
	VMOVUPS   X5, (SI)
	VCVTPS2PD X5, Y5
	VADDPD    Y5, Y12, Y12

expSumDone:
	VMOVUPD Y12, (DI)
	VZEROUPPER
	RET

// func maxAsm(s *float32, n int) float32
//
// The largest of s[0:n] (n a multiple of 8, > 0); NaN (the first NaN's bits do not matter: Go's
// max returns a NaN) if any is NaN. VMAXPS returns its second operand when either is NaN, so NaNs
// are tracked apart by an unordered compare.
TEXT ·maxAsm(SB), NOSPLIT, $0-20
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	VXORPS  Y2, Y2, Y2
	SHRQ    $3, CX

maxLoop:
	VMOVUPS (SI), Y1
	VCMPPS  $3, Y1, Y1, Y3
	VORPS   Y3, Y2, Y2
	VMAXPS  Y0, Y1, Y0
	ADDQ    $32, SI
	DECQ    CX
	JNZ     maxLoop
	VEXTRACTF128 $1, Y0, X1
	VMAXPS  X0, X1, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS  X0, X1, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS  X0, X1, X0
	VMOVMSKPS Y2, AX
	TESTL   AX, AX
	JZ      maxDone
	VPCMPEQD Y0, Y0, Y0 // all ones: a NaN
maxDone:
	VMOVSS  X0, ret+16(FP)
	VZEROUPPER
	RET

// func divAsm(s *float32, n int, d float32)
//
// s[i] /= d for i < n (a multiple of 8).
TEXT ·divAsm(SB), NOSPLIT, $0-20
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS d+16(FP), Y0
	SHRQ $3, CX
	JZ   divDone

divLoop:
	VMOVUPS (SI), Y1
	VDIVPS  Y0, Y1, Y1
	VMOVUPS Y1, (SI)
	ADDQ    $32, SI
	DECQ    CX
	JNZ     divLoop

divDone:
	VZEROUPPER
	RET

// func toHalfAsm(src *float32, dst *uint16, n int) (nan bool)
//
// Rounds n float32 (a multiple of 8) to IEEE half floats, to nearest even (VCVTPS2PH). It
// reports whether any input was NaN, whose encoding differs from model.Float32ToHalf's (the
// caller redoes those rows in Go); every other value gets that function's bits.
TEXT ·toHalfAsm(SB), NOSPLIT, $0-25
	MOVQ src+0(FP), SI
	MOVQ dst+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y2, Y2, Y2
	SHRQ $3, CX
	JZ   toHalfDone

toHalfLoop:
	VMOVUPS   (SI), Y0
	VCMPPS    $3, Y0, Y0, Y1
	VORPS     Y1, Y2, Y2
	VCVTPS2PH $0, Y0, X0
	VMOVDQU   X0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       toHalfLoop

toHalfDone:
	VMOVMSKPS Y2, AX
	TESTL     AX, AX
	SETNE     nan+24(FP)
	VZEROUPPER
	RET

// func prefetchAsm(p *uint16, n int)
//
// Asks for the n bytes at p in cache, one PREFETCHT0 per 64-byte line (a prefetch never faults).
TEXT ·prefetchAsm(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ $63, CX
	SHRQ $6, CX
	JZ   prefetchDone

prefetchLoop:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	DECQ       CX
	JNZ        prefetchLoop

prefetchDone:
	RET
