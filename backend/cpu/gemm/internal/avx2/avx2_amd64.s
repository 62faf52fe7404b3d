//go:build !purego

#include "textflag.h"

// REDUCE8 sums the eight lanes of Y register y (X view x) into lane 0 and stores it at dst.
#define REDUCE8(y, x, dst) \
	VEXTRACTF128 $1, y, X15 \
	VADDPS       X15, x, x  \
	VHADDPS      x, x, x    \
	VHADDPS      x, x, x    \
	VMOVSS       x, dst

// func Dot4x3(blocks int, a *float32, lda int, b *float32, ldb int, out *[12]float32)
// out[r*3+c] = Σ_{p<8·blocks} a[r·lda+p]·b[c·ldb+p] for r < 4, c < 3; lda and ldb in elements.
TEXT ·Dot4x3(SB), NOSPLIT, $0-48
	MOVQ blocks+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), BX
	MOVQ ldb+32(FP), R10
	MOVQ out+40(FP), DI
	SHLQ $2, R8              // strides in bytes
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R9      // 3·lda
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JZ    reduce4x3

loop4x3:
	VMOVUPS     (BX), Y12
	VMOVUPS     (BX)(R10*1), Y13
	VMOVUPS     (BX)(R10*2), Y14
	VMOVUPS     (AX), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VMOVUPS     (AX)(R8*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VMOVUPS     (AX)(R8*2), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VMOVUPS     (AX)(R9*1), Y15
	VFMADD231PS Y12, Y15, Y9
	VFMADD231PS Y13, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	ADDQ        $32, AX
	ADDQ        $32, BX
	DECQ        CX
	JNZ         loop4x3

reduce4x3:
	REDUCE8(Y0, X0, 0(DI))
	REDUCE8(Y1, X1, 4(DI))
	REDUCE8(Y2, X2, 8(DI))
	REDUCE8(Y3, X3, 12(DI))
	REDUCE8(Y4, X4, 16(DI))
	REDUCE8(Y5, X5, 20(DI))
	REDUCE8(Y6, X6, 24(DI))
	REDUCE8(Y7, X7, 28(DI))
	REDUCE8(Y8, X8, 32(DI))
	REDUCE8(Y9, X9, 36(DI))
	REDUCE8(Y10, X10, 40(DI))
	REDUCE8(Y11, X11, 44(DI))
	VZEROUPPER
	RET

// func Dot1x4(blocks int, a *float32, b *float32, ldb int, out *[4]float32)
// out[c] = Σ_{p<8·blocks} a[p]·b[c·ldb+p] for c < 4; ldb in elements. Two accumulators per
// output hide the FMA latency, since one row of A gives too few independent sums.
TEXT ·Dot1x4(SB), NOSPLIT, $0-40
	MOVQ blocks+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ ldb+24(FP), R10
	MOVQ out+32(FP), DI
	SHLQ $2, R10
	LEAQ (R10)(R10*2), R11   // 3·ldb
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	CMPQ CX, $2
	JLT  tail1x4

loop1x4:
	VMOVUPS     (AX), Y14
	VMOVUPS     32(AX), Y15
	VFMADD231PS (BX), Y14, Y0
	VFMADD231PS (BX)(R10*1), Y14, Y1
	VFMADD231PS (BX)(R10*2), Y14, Y2
	VFMADD231PS (BX)(R11*1), Y14, Y3
	VFMADD231PS 32(BX), Y15, Y4
	VFMADD231PS 32(BX)(R10*1), Y15, Y5
	VFMADD231PS 32(BX)(R10*2), Y15, Y6
	VFMADD231PS 32(BX)(R11*1), Y15, Y7
	ADDQ        $64, AX
	ADDQ        $64, BX
	SUBQ        $2, CX
	CMPQ        CX, $2
	JGE         loop1x4

tail1x4:
	TESTQ CX, CX
	JZ    reduce1x4
	VMOVUPS     (AX), Y14
	VFMADD231PS (BX), Y14, Y0
	VFMADD231PS (BX)(R10*1), Y14, Y1
	VFMADD231PS (BX)(R10*2), Y14, Y2
	VFMADD231PS (BX)(R11*1), Y14, Y3

reduce1x4:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	REDUCE8(Y0, X0, 0(DI))
	REDUCE8(Y1, X1, 4(DI))
	REDUCE8(Y2, X2, 8(DI))
	REDUCE8(Y3, X3, 12(DI))
	VZEROUPPER
	RET

// func AddNN4x16(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)
// c[r·ldc+j] += Σ_{p<k} a[r·lda+p]·b[p·ldb+j] for r < 4, j < 16; strides in elements. Outer
// products: each step broadcasts one element of each A row against two vectors of a B row.
TEXT ·AddNN4x16(SB), NOSPLIT, $0-56
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ lda+16(FP), R8
	MOVQ b+24(FP), BX
	MOVQ ldb+32(FP), R10
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), R11
	SHLQ $2, R8
	SHLQ $2, R10
	SHLQ $2, R11
	LEAQ (R8)(R8*2), R9      // 3·lda
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JZ    storenn

loopnn:
	VMOVUPS      (BX), Y12
	VMOVUPS      32(BX), Y13
	VBROADCASTSS (AX), Y14
	VFMADD231PS  Y12, Y14, Y0
	VFMADD231PS  Y13, Y14, Y1
	VBROADCASTSS (AX)(R8*1), Y15
	VFMADD231PS  Y12, Y15, Y2
	VFMADD231PS  Y13, Y15, Y3
	VBROADCASTSS (AX)(R8*2), Y14
	VFMADD231PS  Y12, Y14, Y4
	VFMADD231PS  Y13, Y14, Y5
	VBROADCASTSS (AX)(R9*1), Y15
	VFMADD231PS  Y12, Y15, Y6
	VFMADD231PS  Y13, Y15, Y7
	ADDQ         $4, AX
	ADDQ         R10, BX
	DECQ         CX
	JNZ          loopnn

storenn:
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R11, DI
	VADDPS  (DI), Y2, Y2
	VADDPS  32(DI), Y3, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    R11, DI
	VADDPS  (DI), Y4, Y4
	VADDPS  32(DI), Y5, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    R11, DI
	VADDPS  (DI), Y6, Y6
	VADDPS  32(DI), Y7, Y7
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	VZEROUPPER
	RET
