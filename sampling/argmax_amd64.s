//go:build !purego

#include "textflag.h"

// func maxAVX2(p *float32, n int) float32
// Four accumulators of 8 lanes start at -Inf; each takes x only when x > acc (VMAXPS returns
// its second source when either is NaN), so NaN never enters them.
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	MOVQ AX, X0
	VPBROADCASTD X0, Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	LEAQ (SI)(CX*4), DI

loop:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	VMAXPS Y2, Y6, Y2
	VMAXPS Y3, Y7, Y3
	ADDQ $128, SI
	CMPQ SI, DI
	JLT loop

	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func findEqAVX2(p *float32, n int, v float32) int
TEXT ·findEqAVX2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS v+16(FP), Y0
	XORQ AX, AX

loop:
	VCMPPS $0, (SI)(AX*4), Y0, Y1
	VMOVMSKPS Y1, DX
	TESTL DX, DX
	JNZ found
	ADDQ $8, AX
	CMPQ AX, CX
	JLT loop
	VZEROUPPER
	MOVQ $-1, ret+24(FP)
	RET

found:
	BSFL DX, DX
	ADDQ DX, AX
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
