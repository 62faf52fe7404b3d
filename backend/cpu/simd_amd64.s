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
