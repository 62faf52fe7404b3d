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

// func dotRows4F16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32)
TEXT ·dotRows4F16Asm(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ ldk+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $1, R8              // row stride in bytes
	LEAQ (R8)(R8*2), R9      // 3 rows
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ   reduceF16

loopF16:
	VMOVUPS     (SI), Y4
	VCVTPH2PS   (DI), Y5
	VCVTPH2PS   (DI)(R8*1), Y6
	VCVTPH2PS   (DI)(R8*2), Y7
	VCVTPH2PS   (DI)(R9*1), Y8
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y6, Y4, Y1
	VFMADD231PS Y7, Y4, Y2
	VFMADD231PS Y8, Y4, Y3
	ADDQ        $32, SI
	ADDQ        $16, DI
	DECQ        CX
	JNZ         loopF16

reduceF16:
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	VZEROUPPER
	RET

// func dotRows4BF16Asm(q *float32, k *uint16, ldk int, n int, out *[4]float32)
TEXT ·dotRows4BF16Asm(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ ldk+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ $3, CX
	JZ   reduceBF16

loopBF16:
	VMOVUPS     (SI), Y4
	VPMOVZXWD   (DI), Y5
	VPMOVZXWD   (DI)(R8*1), Y6
	VPMOVZXWD   (DI)(R8*2), Y7
	VPMOVZXWD   (DI)(R9*1), Y8
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VPSLLD      $16, Y8, Y8
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y6, Y4, Y1
	VFMADD231PS Y7, Y4, Y2
	VFMADD231PS Y8, Y4, Y3
	ADDQ        $32, SI
	ADDQ        $16, DI
	DECQ        CX
	JNZ         loopBF16

reduceBF16:
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	VZEROUPPER
	RET

// func axpyRows4F16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32)
TEXT ·axpyRows4F16Asm(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ ldv+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VBROADCASTSS (SI), Y4
	VBROADCASTSS 4(SI), Y5
	VBROADCASTSS 8(SI), Y6
	VBROADCASTSS 12(SI), Y7
	SHRQ $3, CX
	JZ   doneF16

loopAxF16:
	VCVTPH2PS   (DI), Y8
	VCVTPH2PS   (DI)(R8*1), Y9
	VCVTPH2PS   (DI)(R8*2), Y10
	VCVTPH2PS   (DI)(R9*1), Y11
	VMOVUPS     (DX), Y0
	VMULPS      Y9, Y5, Y1
	VFMADD231PS Y8, Y4, Y0
	VFMADD231PS Y11, Y7, Y1
	VFMADD231PS Y10, Y6, Y0
	VADDPS      Y1, Y0, Y0
	VMOVUPS     Y0, (DX)
	ADDQ        $16, DI
	ADDQ        $32, DX
	DECQ        CX
	JNZ         loopAxF16

doneF16:
	VZEROUPPER
	RET

// func axpyRows4BF16Asm(p *[4]float32, v *uint16, ldv int, n int, out *float32)
TEXT ·axpyRows4BF16Asm(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ ldv+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VBROADCASTSS (SI), Y4
	VBROADCASTSS 4(SI), Y5
	VBROADCASTSS 8(SI), Y6
	VBROADCASTSS 12(SI), Y7
	SHRQ $3, CX
	JZ   doneBF16

loopAxBF16:
	VPMOVZXWD   (DI), Y8
	VPMOVZXWD   (DI)(R8*1), Y9
	VPMOVZXWD   (DI)(R8*2), Y10
	VPMOVZXWD   (DI)(R9*1), Y11
	VPSLLD      $16, Y8, Y8
	VPSLLD      $16, Y9, Y9
	VPSLLD      $16, Y10, Y10
	VPSLLD      $16, Y11, Y11
	VMOVUPS     (DX), Y0
	VMULPS      Y9, Y5, Y1
	VFMADD231PS Y8, Y4, Y0
	VFMADD231PS Y11, Y7, Y1
	VFMADD231PS Y10, Y6, Y0
	VADDPS      Y1, Y0, Y0
	VMOVUPS     Y0, (DX)
	ADDQ        $16, DI
	ADDQ        $32, DX
	DECQ        CX
	JNZ         loopAxBF16

doneBF16:
	VZEROUPPER
	RET

// EXP32_CONSTS loads the constants EXP32 keeps in registers from the expConsts at R10:
// Y6 log2e, Y7 1/2, Y8 ln2, Y9..Y13 the polynomial's coefficients 1/5040 ... 1/6, Y15 1.
#define EXP32_CONSTS \
	VBROADCASTSD 0(R10), Y6 \
	VBROADCASTSD 8(R10), Y7 \
	VBROADCASTSD 16(R10), Y8 \
	VBROADCASTSD 24(R10), Y9 \
	VBROADCASTSD 32(R10), Y10 \
	VBROADCASTSD 40(R10), Y11 \
	VBROADCASTSD 48(R10), Y12 \
	VBROADCASTSD 56(R10), Y13 \
	VBROADCASTSD 64(R10), Y15

// EXP32 sets X5 to exp32 of the four float32 in X1, each operation the one exp32 does, in its
// order, so the results are the same bits; it uses Y2..Y4 and reads the table at R10.
#define EXP32 \
	VCVTPS2PD   X1, Y2 \
	VMULPD      Y6, Y2, Y3 \
	VADDPD      Y7, Y3, Y3 \
	VROUNDPD    $1, Y3, Y3 \
	VMULPD      Y8, Y3, Y4 \
	VSUBPD      Y4, Y2, Y4 \
	VMULPD      Y9, Y4, Y5 \
	VADDPD      Y10, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y11, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y12, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y13, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y7, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y15, Y5, Y5 \
	VMULPD      Y5, Y4, Y5 \
	VADDPD      Y15, Y5, Y5 \
	VCVTPD2DQY  Y3, X3 \
	VPMOVSXDQ   X3, Y3 \
	VPADDQ      96(R10), Y3, Y3 \
	VPSLLQ      $52, Y3, Y3 \
	VMULPD      Y3, Y5, Y5 \
	VCVTPD2PSY  Y5, X5 \
	VCMPPS      $0x1e, 128(R10), X1, X2 \
	VBLENDVPS   X2, 160(R10), X5, X5 \
	VCMPPS      $0x11, 144(R10), X1, X2 \
	VANDNPS     X5, X2, X5 \
	VCMPPS      $3, X1, X1, X2 \
	VBLENDVPS   X2, X1, X5, X5

// EXP32 in steps: x = n·ln2 + r with n = floor(x·log2e + 1/2) (VROUNDPD $1 is floor), p the
// degree-7 polynomial in r by Horner's rule, e = float32(p·2^n) with 2^n built from n's bits;
// then exp32's edge cases: x > 88.8 gives +Inf, x < -104 gives 0, NaN gives x.

// func swiGLUAsm(gate *float32, up *float32, n int, c *expConsts)
//
// gate[i] = float32(float64(g) / (1 + float64(exp32(-g)))) · up[i], four lanes at a time, the
// same bits as swiGLU's Go loop.
TEXT ·swiGLUAsm(SB), NOSPLIT, $0-32
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R10
	EXP32_CONSTS
	SHRQ $2, CX
	JZ   swigluDone

swigluLoop:
	VMOVUPS     (SI), X0          // g
	VXORPS      80(R10), X0, X1   // x = -g (sign flip)
	EXP32
	VCVTPS2PD   X5, Y5
	VADDPD      Y15, Y5, Y5       // 1 + e
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

// func expShiftedAsm(s *float32, n int, m float32, scale float32, c *expConsts)
//
// s[i] = exp32((s[i] - m) · scale) for i < n (a multiple of 4), four lanes at a time, the same
// bits as softmaxScaled's Go loop.
TEXT ·expShiftedAsm(SB), NOSPLIT, $0-32
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), X0
	VBROADCASTSS scale+20(FP), X14
	MOVQ c+24(FP), R10
	EXP32_CONSTS
	SHRQ $2, CX
	JZ   expDone

expLoop:
	VMOVUPS     (SI), X1
	VSUBPS      X0, X1, X1
	VMULPS      X14, X1, X1
	EXP32
	VMOVUPS     X5, (SI)
	ADDQ        $16, SI
	DECQ        CX
	JNZ         expLoop

expDone:
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

// func sum4Asm(s *float32, n int, lanes *[4]float64)
//
// lanes[l] = float64(s[l]) + float64(s[l+4]) + ... in that order, over s[0:n] (n a multiple of 4).
TEXT ·sum4Asm(SB), NOSPLIT, $0-24
	MOVQ s+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VXORPD Y0, Y0, Y0
	SHRQ   $2, CX
	JZ     sum4Done

sum4Loop:
	VCVTPS2PD (SI), Y1
	VADDPD    Y1, Y0, Y0
	ADDQ      $16, SI
	DECQ      CX
	JNZ       sum4Loop

sum4Done:
	VMOVUPD Y0, (DI)
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

// WIDEN_F16 and WIDEN_BF16 load eight 16-bit floats at mem and widen them to float32 in reg.
#define WIDEN_F16(mem, reg) VCVTPH2PS mem, reg
#define WIDEN_BF16(mem, reg) VPMOVZXWD mem, reg; VPSLLD $16, reg, reg

// func dotRows4x2F16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32)
//
// dotRows4F16Asm for two queries at once (out[0:4] for q0, out[4:8] for q1): each key vector
// is widened once for both, and each query's sums are formed as in the one-query kernel.
TEXT ·dotRows4x2F16Asm(SB), NOSPLIT, $0-48
	MOVQ q0+0(FP), SI
	MOVQ q1+8(FP), BX
	MOVQ k+16(FP), DI
	MOVQ ldk+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SHRQ $3, CX
	JZ   reduce2F16

loop2F16:
	VMOVUPS     (SI), Y4
	VMOVUPS     (BX), Y5
	WIDEN_F16((DI), Y6)
	WIDEN_F16((DI)(R8*1), Y7)
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y6, Y5, Y8
	VFMADD231PS Y7, Y4, Y1
	VFMADD231PS Y7, Y5, Y9
	WIDEN_F16((DI)(R8*2), Y6)
	WIDEN_F16((DI)(R9*1), Y7)
	VFMADD231PS Y6, Y4, Y2
	VFMADD231PS Y6, Y5, Y10
	VFMADD231PS Y7, Y4, Y3
	VFMADD231PS Y7, Y5, Y11
	ADDQ        $32, SI
	ADDQ        $32, BX
	ADDQ        $16, DI
	DECQ        CX
	JNZ         loop2F16

reduce2F16:
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	VHADDPS      Y9, Y8, Y8
	VHADDPS      Y11, Y10, Y10
	VHADDPS      Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS       X9, X8, X8
	VMOVUPS      X8, 16(DX)
	VZEROUPPER
	RET

// func axpyRows4x2F16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32)
//
// axpyRows4F16Asm for two queries at once (weights p[0:4] into out0, p[4:8] into out1): each
// value vector is widened once for both, and each output is formed as in the one-query kernel.
TEXT ·axpyRows4x2F16Asm(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ ldv+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out0+32(FP), DX
	MOVQ out1+40(FP), BX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VBROADCASTSS (SI), Y8
	VBROADCASTSS 4(SI), Y9
	VBROADCASTSS 8(SI), Y10
	VBROADCASTSS 12(SI), Y11
	VBROADCASTSS 16(SI), Y12
	VBROADCASTSS 20(SI), Y13
	VBROADCASTSS 24(SI), Y14
	VBROADCASTSS 28(SI), Y15
	SHRQ $3, CX
	JZ   doneAx2F16

loopAx2F16:
	WIDEN_F16((DI), Y4)
	WIDEN_F16((DI)(R8*1), Y5)
	WIDEN_F16((DI)(R8*2), Y6)
	WIDEN_F16((DI)(R9*1), Y7)
	VMOVUPS     (DX), Y0
	VMULPS      Y5, Y9, Y1
	VFMADD231PS Y4, Y8, Y0
	VFMADD231PS Y7, Y11, Y1
	VFMADD231PS Y6, Y10, Y0
	VADDPS      Y1, Y0, Y0
	VMOVUPS     Y0, (DX)
	VMOVUPS     (BX), Y2
	VMULPS      Y5, Y13, Y3
	VFMADD231PS Y4, Y12, Y2
	VFMADD231PS Y7, Y15, Y3
	VFMADD231PS Y6, Y14, Y2
	VADDPS      Y3, Y2, Y2
	VMOVUPS     Y2, (BX)
	ADDQ        $16, DI
	ADDQ        $32, DX
	ADDQ        $32, BX
	DECQ        CX
	JNZ         loopAx2F16

doneAx2F16:
	VZEROUPPER
	RET

// func dotRows4x2BF16Asm(q0, q1 *float32, k *uint16, ldk int, n int, out *[8]float32)
//
// dotRows4BF16Asm for two queries at once (out[0:4] for q0, out[4:8] for q1): each key vector
// is widened once for both, and each query's sums are formed as in the one-query kernel.
TEXT ·dotRows4x2BF16Asm(SB), NOSPLIT, $0-48
	MOVQ q0+0(FP), SI
	MOVQ q1+8(FP), BX
	MOVQ k+16(FP), DI
	MOVQ ldk+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	SHRQ $3, CX
	JZ   reduce2BF16

loop2BF16:
	VMOVUPS     (SI), Y4
	VMOVUPS     (BX), Y5
	WIDEN_BF16((DI), Y6)
	WIDEN_BF16((DI)(R8*1), Y7)
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y6, Y5, Y8
	VFMADD231PS Y7, Y4, Y1
	VFMADD231PS Y7, Y5, Y9
	WIDEN_BF16((DI)(R8*2), Y6)
	WIDEN_BF16((DI)(R9*1), Y7)
	VFMADD231PS Y6, Y4, Y2
	VFMADD231PS Y6, Y5, Y10
	VFMADD231PS Y7, Y4, Y3
	VFMADD231PS Y7, Y5, Y11
	ADDQ        $32, SI
	ADDQ        $32, BX
	ADDQ        $16, DI
	DECQ        CX
	JNZ         loop2BF16

reduce2BF16:
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	VHADDPS      Y9, Y8, Y8
	VHADDPS      Y11, Y10, Y10
	VHADDPS      Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS       X9, X8, X8
	VMOVUPS      X8, 16(DX)
	VZEROUPPER
	RET

// func axpyRows4x2BF16Asm(p *[8]float32, v *uint16, ldv int, n int, out0, out1 *float32)
//
// axpyRows4BF16Asm for two queries at once (weights p[0:4] into out0, p[4:8] into out1): each
// value vector is widened once for both, and each output is formed as in the one-query kernel.
TEXT ·axpyRows4x2BF16Asm(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ ldv+16(FP), R8
	MOVQ n+24(FP), CX
	MOVQ out0+32(FP), DX
	MOVQ out1+40(FP), BX
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	VBROADCASTSS (SI), Y8
	VBROADCASTSS 4(SI), Y9
	VBROADCASTSS 8(SI), Y10
	VBROADCASTSS 12(SI), Y11
	VBROADCASTSS 16(SI), Y12
	VBROADCASTSS 20(SI), Y13
	VBROADCASTSS 24(SI), Y14
	VBROADCASTSS 28(SI), Y15
	SHRQ $3, CX
	JZ   doneAx2BF16

loopAx2BF16:
	WIDEN_BF16((DI), Y4)
	WIDEN_BF16((DI)(R8*1), Y5)
	WIDEN_BF16((DI)(R8*2), Y6)
	WIDEN_BF16((DI)(R9*1), Y7)
	VMOVUPS     (DX), Y0
	VMULPS      Y5, Y9, Y1
	VFMADD231PS Y4, Y8, Y0
	VFMADD231PS Y7, Y11, Y1
	VFMADD231PS Y6, Y10, Y0
	VADDPS      Y1, Y0, Y0
	VMOVUPS     Y0, (DX)
	VMOVUPS     (BX), Y2
	VMULPS      Y5, Y13, Y3
	VFMADD231PS Y4, Y12, Y2
	VFMADD231PS Y7, Y15, Y3
	VFMADD231PS Y6, Y14, Y2
	VADDPS      Y3, Y2, Y2
	VMOVUPS     Y2, (BX)
	ADDQ        $16, DI
	ADDQ        $32, DX
	ADDQ        $32, BX
	DECQ        CX
	JNZ         loopAx2BF16

doneAx2BF16:
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
