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

// func swiGLUAsm(gate *float32, up *float32, n int, c *swiGLUConsts)
//
// gate[i] = float32(float64(g) / (1 + float64(exp32(-g)))) · up[i], four lanes at a time, each
// operation the one exp32 and swiGLU do, in their order, so the results are the same bits.
// Register use: Y6 log2e, Y7 1/2, Y8 ln2, Y9..Y15 the polynomial coefficients below 1/2 and 1.
TEXT ·swiGLUAsm(SB), NOSPLIT, $0-32
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R10
	VBROADCASTSD 0(R10), Y6     // log2e
	VBROADCASTSD 8(R10), Y7     // 0.5 (also the coefficient 1/2)
	VBROADCASTSD 16(R10), Y8    // ln2
	VBROADCASTSD 24(R10), Y9    // 1/5040
	VBROADCASTSD 32(R10), Y10   // 1/720
	VBROADCASTSD 40(R10), Y11   // 1/120
	VBROADCASTSD 48(R10), Y12   // 1/24
	VBROADCASTSD 56(R10), Y13   // 1/6
	VBROADCASTSD 64(R10), Y15   // 1
	SHRQ $2, CX
	JZ   swigluDone

swigluLoop:
	VMOVUPS     (SI), X0          // g
	VXORPS      80(R10), X0, X1   // x = -g (sign flip)
	VCVTPS2PD   X1, Y2            // xd
	VMULPD      Y6, Y2, Y3
	VADDPD      Y7, Y3, Y3
	VROUNDPD    $1, Y3, Y3        // n = floor(xd·log2e + 0.5)
	VMULPD      Y8, Y3, Y4
	VSUBPD      Y4, Y2, Y4        // r = xd - n·ln2
	VMULPD      Y9, Y4, Y5
	VADDPD      Y10, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y11, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y12, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y13, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y7, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y15, Y5, Y5
	VMULPD      Y5, Y4, Y5
	VADDPD      Y15, Y5, Y5       // p
	VCVTPD2DQY  Y3, X3            // n as int32 (exact: an integer)
	VPMOVSXDQ   X3, Y3
	VPADDQ      96(R10), Y3, Y3   // + 1023
	VPSLLQ      $52, Y3, Y3       // 2^n
	VMULPD      Y3, Y5, Y5
	VCVTPD2PSY  Y5, X5            // e = float32(p·2^n)
	// exp32's edge cases: x > 88.8 gives +Inf, x < -104 gives 0, NaN gives x.
	VCMPPS      $0x1e, 128(R10), X1, X2
	VBLENDVPS   X2, 160(R10), X5, X5
	VCMPPS      $0x11, 144(R10), X1, X2
	VANDNPS     X5, X2, X5
	VCMPPS      $3, X1, X1, X2
	VBLENDVPS   X2, X1, X5, X5
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
