//go:build ignore

// gen_attn writes attn_amd64.s: the kernels of attendHalf for 16-bit caches (BF16, F16). Run
// `go generate` after editing it. Register use is written out per kernel; every variant of a
// kernel family forms each result by the same arithmetic (see the file's header), which
// TestKeyKernels checks.
package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// widen returns the instructions that load eight 16-bit floats at mem into float32 register reg.
var widen = map[string]func(mem, reg string) []string{
	"BF16": func(mem, reg string) []string {
		return []string{fmt.Sprintf("VPMOVZXWD %s, %s", mem, reg), fmt.Sprintf("VPSLLD $16, %s, %s", reg, reg)}
	},
	"F16": func(mem, reg string) []string { return []string{fmt.Sprintf("VCVTPH2PS %s, %s", mem, reg)} },
}

const header = `//go:build !purego

#include "textflag.h"

// The attention kernels of attendHalf: queries and probabilities in float32, keys and values in
// a 16-bit cache (bfloat16 or IEEE half), widened in registers. Written by gen_attn.go.
//
// dotKeysQ (Q = 4, 2, 1 queries) sets out[i·ldo + r] = q_i · k_r for r < cnt. Every score is the
// same bits in every variant: eight lanes each run one fused multiply-add chain over the head
// dimension in order, then ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), the sum dotRows4Asm forms. The
// variants differ only in how many keys and queries share a pass (4 queries x 2 keys, 2 x 4,
// 1 x 4, then the last keys one at a time).
//
// axpyKeysQ (Q = 2, 1) adds Σ_{r<cnt} p[i·ldp + r]·v_r to out[i·ldo : i·ldo+n], one fused
// multiply-add per key and element, keys in order, so a query's output does not depend on the
// queries it shares a pass with, nor on how its keys are split among calls; axpyKeys3F32Asm does
// the same for three queries over rows already widened to float32. n is a multiple of 8 (32 at a
// time, then 8); ldq, ldk, ldp, ldv and ldo are in elements.`

// out collects the file's lines.
var out []string

// emit appends lines, indenting instructions (not labels, comments or TEXT lines).
func emit(lines ...string) {
	for _, l := range lines {
		if l == "" || strings.HasSuffix(l, ":") || strings.HasPrefix(l, "//") || strings.HasPrefix(l, "TEXT") {
			out = append(out, l)
		} else {
			out = append(out, "\t"+l)
		}
	}
}

// args loads the arguments every kernel shares past the first five.
var args = []string{"MOVQ cnt+40(FP), BX", "MOVQ out+48(FP), DX", "MOVQ ldo+56(FP), R9", "SHLQ $2, R9"}

// reduce4 sums accumulators Ya..Yd into the lanes of Xa (in that order), X(x) as scratch.
func reduce4(a, b, c, d, x int) []string {
	return []string{fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", b, a, a), fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", d, c, c),
		fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", c, a, a), fmt.Sprintf("VEXTRACTF128 $1, Y%d, X%d", a, x), fmt.Sprintf("VADDPS X%d, X%d, X%d", x, a, a)}
}

// reduce2 sums Ya and Yb into lanes 0 and 1 of Xa, by the same tree.
func reduce2(a, b, x int) []string {
	return []string{fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", b, a, a), fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", a, a, a),
		fmt.Sprintf("VEXTRACTF128 $1, Y%d, X%d", a, x), fmt.Sprintf("VADDPS X%d, X%d, X%d", x, a, a)}
}

// reduce1 sums Ya into lane 0 of Xa, by the same tree.
func reduce1(a, x int) []string {
	return []string{fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", a, a, a), fmt.Sprintf("VHADDPS Y%d, Y%d, Y%d", a, a, a),
		fmt.Sprintf("VEXTRACTF128 $1, Y%d, X%d", a, x), fmt.Sprintf("VADDPS X%d, X%d, X%d", x, a, a)}
}

// zero clears Y0..Y(n-1).
func zero(n int) []string {
	var l []string
	for i := range n {
		l = append(l, fmt.Sprintf("VXORPS Y%d, Y%d, Y%d", i, i, i))
	}
	return l
}

// dot writes dotKeys{q}{t}Asm.
func dot(q int, t string) {
	w := widen[t]
	name := fmt.Sprintf("dotKeys%d%sAsm", q, t)
	emit("", fmt.Sprintf("// func %s(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int)", name),
		fmt.Sprintf("TEXT ·%s(SB), NOSPLIT, $0-64", name),
		"MOVQ q+0(FP), SI", "MOVQ ldq+8(FP), R10", "SHLQ $2, R10", "MOVQ k+16(FP), DI", "MOVQ ldk+24(FP), R8", "SHLQ $1, R8",
		"MOVQ n+32(FP), CX", "SHLQ $1, CX")
	emit(args...)
	if q == 4 {
		emit("LEAQ (SI)(R10*1), R11", "LEAQ (SI)(R10*2), R12", "LEAQ (R12)(R10*1), R13")
		qs := []string{"SI", "R11", "R12", "R13"}
		// Three keys at a time (12 chains keep both FMA pipes busy), then two, then one; R14
		// holds the third key's row during the products and 3·ldo for the stores.
		emit("triples:", "CMPQ BX, $3", "JLT pairs", "LEAQ (DI)(R8*1), R10", "LEAQ (DI)(R8*2), R14")
		emit(zero(12)...)
		emit("XORQ AX, AX", "tripleChunk:")
		emit(w("(DI)(AX*1)", "Y12")...)
		emit(w("(R10)(AX*1)", "Y13")...)
		emit(w("(R14)(AX*1)", "Y14")...)
		for kk, kr := range []string{"Y12", "Y13", "Y14"} {
			for i, qr := range qs {
				emit(fmt.Sprintf("VFMADD231PS (%s)(AX*2), %s, Y%d", qr, kr, 4*kk+i))
			}
		}
		emit("ADDQ $16, AX", "CMPQ AX, CX", "JLT tripleChunk")
		emit(reduce4(0, 1, 2, 3, 1)...)
		emit(reduce4(4, 5, 6, 7, 5)...)
		emit(reduce4(8, 9, 10, 11, 9)...)
		emit("LEAQ (R9)(R9*2), R14")
		emit("VMOVSS X0, (DX)", "VMOVSS X4, 4(DX)", "VMOVSS X8, 8(DX)")
		for lane, idx := range []string{"", "(R9*1)", "(R9*2)", "(R14*1)"} {
			if lane > 0 {
				emit(fmt.Sprintf("VEXTRACTPS $%d, X0, (DX)%s", lane, idx), fmt.Sprintf("VEXTRACTPS $%d, X4, 4(DX)%s", lane, idx),
					fmt.Sprintf("VEXTRACTPS $%d, X8, 8(DX)%s", lane, idx))
			}
		}
		emit("LEAQ (DI)(R8*2), DI", "ADDQ R8, DI", "ADDQ $12, DX", "SUBQ $3, BX", "JMP triples")
		emit("pairs:", "CMPQ BX, $2", "JLT one", "LEAQ (DI)(R8*1), R10", "LEAQ (R9)(R9*2), R14")
		emit(zero(8)...)
		emit("XORQ AX, AX", "pairChunk:")
		emit(w("(DI)(AX*1)", "Y8")...)
		emit(w("(R10)(AX*1)", "Y9")...)
		for kk, kr := range []string{"Y8", "Y9"} {
			for i, qr := range qs {
				emit(fmt.Sprintf("VFMADD231PS (%s)(AX*2), %s, Y%d", qr, kr, 4*kk+i))
			}
		}
		emit("ADDQ $16, AX", "CMPQ AX, CX", "JLT pairChunk")
		emit(reduce4(0, 1, 2, 3, 1)...)
		emit(reduce4(4, 5, 6, 7, 5)...)
		emit("VMOVSS X0, (DX)", "VMOVSS X4, 4(DX)",
			"VEXTRACTPS $1, X0, (DX)(R9*1)", "VEXTRACTPS $1, X4, 4(DX)(R9*1)",
			"VEXTRACTPS $2, X0, (DX)(R9*2)", "VEXTRACTPS $2, X4, 4(DX)(R9*2)",
			"VEXTRACTPS $3, X0, (DX)(R14*1)", "VEXTRACTPS $3, X4, 4(DX)(R14*1)")
		emit("LEAQ (DI)(R8*2), DI", "ADDQ $8, DX", "SUBQ $2, BX", "JMP pairs")
		emit("one:", "TESTQ BX, BX", "JZ done", "LEAQ (R9)(R9*2), R14")
		emit(zero(4)...)
		emit("XORQ AX, AX", "oneChunk:")
		emit(w("(DI)(AX*1)", "Y8")...)
		for i, qr := range qs {
			emit(fmt.Sprintf("VFMADD231PS (%s)(AX*2), Y8, Y%d", qr, i))
		}
		emit("ADDQ $16, AX", "CMPQ AX, CX", "JLT oneChunk")
		emit(reduce4(0, 1, 2, 3, 1)...)
		emit("VMOVSS X0, (DX)", "VEXTRACTPS $1, X0, (DX)(R9*1)", "VEXTRACTPS $2, X0, (DX)(R9*2)", "VEXTRACTPS $3, X0, (DX)(R14*1)")
	} else {
		qs := []string{"SI", "R11"}[:q]
		if q == 2 {
			emit("LEAQ (SI)(R10*1), R11")
		}
		// Four keys at a time, then one.
		emit("quads:", "CMPQ BX, $4", "JLT one", "LEAQ (DI)(R8*1), R10", "LEAQ (DI)(R8*2), R12", "LEAQ (R10)(R8*2), R13")
		emit(zero(4 * q)...)
		emit("XORQ AX, AX", "quadChunk:")
		keys := []string{"DI", "R10", "R12", "R13"}
		for kk := range 4 {
			emit(w(fmt.Sprintf("(%s)(AX*1)", keys[kk]), fmt.Sprintf("Y%d", 8+kk))...)
		}
		for kk := range 4 {
			for i, qr := range qs {
				emit(fmt.Sprintf("VFMADD231PS (%s)(AX*2), Y%d, Y%d", qr, 8+kk, 4*i+kk))
			}
		}
		emit("ADDQ $16, AX", "CMPQ AX, CX", "JLT quadChunk")
		for i := range q {
			emit(reduce4(4*i, 4*i+1, 4*i+2, 4*i+3, 4*i+1)...)
		}
		emit("VMOVUPS X0, (DX)")
		if q == 2 {
			emit("VMOVUPS X4, (DX)(R9*1)")
		}
		emit("LEAQ (DI)(R8*4), DI", "ADDQ $16, DX", "SUBQ $4, BX", "JMP quads")
		emit("one:", "TESTQ BX, BX", "JZ done")
		emit(zero(q)...)
		emit("XORQ AX, AX", "oneChunk:")
		emit(w("(DI)(AX*1)", "Y8")...)
		for i, qr := range qs {
			emit(fmt.Sprintf("VFMADD231PS (%s)(AX*2), Y8, Y%d", qr, i))
		}
		emit("ADDQ $16, AX", "CMPQ AX, CX", "JLT oneChunk")
		if q == 2 {
			emit(reduce2(0, 1, 1)...)
			emit("VMOVSS X0, (DX)", "VEXTRACTPS $1, X0, (DX)(R9*1)")
		} else {
			emit(reduce1(0, 1)...)
			emit("VMOVSS X0, (DX)")
		}
		emit("ADDQ R8, DI", "ADDQ $4, DX", "DECQ BX", "JMP one")
	}
	emit("done:", "VZEROUPPER", "RET")
}

// axpy writes axpyKeys{q}{t}Asm, or axpyKeys3F32Asm (t "F32", q 3) over rows already widened.
func axpy(q int, t string) {
	name := fmt.Sprintf("axpyKeys%d%sAsm", q, t)
	vt, vshift := "*uint16", "SHLQ $1, R8"
	if t == "F32" {
		vt, vshift = "*float32", "SHLQ $2, R8"
	}
	emit("", fmt.Sprintf("// func %s(p *float32, ldp int, v %s, ldv int, n int, cnt int, out *float32, ldo int)", name, vt),
		fmt.Sprintf("TEXT ·%s(SB), NOSPLIT, $0-64", name),
		"MOVQ p+0(FP), SI", "MOVQ ldp+8(FP), R11", "SHLQ $2, R11")
	ps, outs := []string{"SI", "R11", "R14"}[:q], []string{"DX", "R12", "R9"}[:q]
	// tmp is the register that holds slab's end; row the one that walks the rows.
	tmp, row := "R14", "R13"
	if t == "F32" {
		emit("LEAQ (SI)(R11*2), R14")
		tmp = "R13"
	}
	emit("ADDQ SI, R11", "MOVQ v+16(FP), DI", "MOVQ ldv+24(FP), R8", vshift, "MOVQ n+32(FP), CX", "SHLQ $2, CX")
	emit(args...)
	emit("LEAQ (DX)(R9*1), R12")
	if t == "F32" {
		emit("LEAQ (DX)(R9*2), R9")
	}
	emit("TESTQ BX, BX", "JZ done", "XORQ AX, AX")
	// rowAt points row at the slab's first element of key 0: AX counts float32 bytes.
	rowAt := []string{"MOVQ AX, R13", "SHRQ $1, R13", "ADDQ DI, R13"}
	if t == "F32" {
		rowAt = []string{"LEAQ (DI)(AX*1), R13"}
	}
	// 32 elements at a time.
	emit("slab:", fmt.Sprintf("LEAQ 128(AX), %s", tmp), fmt.Sprintf("CMPQ %s, CX", tmp), "JGT eights")
	for i, o := range outs {
		for c := range 4 {
			emit(fmt.Sprintf("VMOVUPS %d(%s)(AX*1), Y%d", 32*c, o, 4*i+c))
		}
	}
	emit(rowAt...)
	emit("XORQ R10, R10", "slabKey:")
	for i, p := range ps {
		emit(fmt.Sprintf("VBROADCASTSS (%s)(R10*4), Y%d", p, 12+i))
	}
	if t == "F32" {
		for c := range 4 {
			for i := range q {
				emit(fmt.Sprintf("VFMADD231PS %d(%s), Y%d, Y%d", 32*c, row, 12+i, 4*i+c))
			}
		}
	} else {
		for c := range 4 {
			emit(widen[t](fmt.Sprintf("%d(%s)", 16*c, row), fmt.Sprintf("Y%d", 8+c))...)
		}
		for i := range q {
			for c := range 4 {
				emit(fmt.Sprintf("VFMADD231PS Y%d, Y%d, Y%d", 8+c, 12+i, 4*i+c))
			}
		}
	}
	emit(fmt.Sprintf("ADDQ R8, %s", row), "INCQ R10", "CMPQ R10, BX", "JLT slabKey")
	for i, o := range outs {
		for c := range 4 {
			emit(fmt.Sprintf("VMOVUPS Y%d, %d(%s)(AX*1)", 4*i+c, 32*c, o))
		}
	}
	if t == "F32" {
		emit("ADDQ $128, AX", "JMP slab")
	} else {
		emit(fmt.Sprintf("MOVQ %s, AX", tmp), "JMP slab")
	}
	// Then 8 at a time.
	emit("eights:", "CMPQ AX, CX", "JGE done")
	for i, o := range outs {
		emit(fmt.Sprintf("VMOVUPS (%s)(AX*1), Y%d", o, 4*i))
	}
	emit(rowAt...)
	emit("XORQ R10, R10", "eightKey:")
	for i, p := range ps {
		emit(fmt.Sprintf("VBROADCASTSS (%s)(R10*4), Y%d", p, 12+i))
	}
	if t == "F32" {
		for i := range q {
			emit(fmt.Sprintf("VFMADD231PS (%s), Y%d, Y%d", row, 12+i, 4*i))
		}
	} else {
		emit(widen[t](fmt.Sprintf("(%s)", row), "Y8")...)
		for i := range q {
			emit(fmt.Sprintf("VFMADD231PS Y8, Y%d, Y%d", 12+i, 4*i))
		}
	}
	emit(fmt.Sprintf("ADDQ R8, %s", row), "INCQ R10", "CMPQ R10, BX", "JLT eightKey")
	for i, o := range outs {
		emit(fmt.Sprintf("VMOVUPS Y%d, (%s)(AX*1)", 4*i, o))
	}
	emit("ADDQ $32, AX", "JMP eights")
	emit("done:", "VZEROUPPER", "RET")
}

func main() {
	out = append(out, header)
	for _, t := range []string{"BF16", "F16"} {
		for _, q := range []int{4, 2, 1} {
			dot(q, t)
		}
		for _, q := range []int{2, 1} {
			axpy(q, t)
		}
	}
	axpy(3, "F32")
	var b bytes.Buffer
	b.WriteString(strings.Join(out, "\n"))
	b.WriteString("\n")
	if err := os.WriteFile("attn_amd64.s", b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
