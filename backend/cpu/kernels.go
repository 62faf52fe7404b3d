package cpu

import (
	"math"

	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/quant"
)

// rmsNorm writes w ⊙ x / sqrt(mean(x²) + eps) to dst (which may alias x). The mean is
// accumulated in float64, at least as accurate as the reference's float32 reduction; the
// scaling then follows the reference's float32 rounding order (x·r first, then ·w).
func rmsNorm(dst, x, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := float32(1 / math.Sqrt(ss/float64(len(x))+eps))
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = w[i] * (v * r)
	}
}

// dot returns Σ a[i]·b[i] over len(a) elements with four independent accumulators, which lets
// the CPU overlap the additions.
func dot(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy adds alpha·x to y.
func axpy(alpha float32, x, y []float32) {
	n := len(y)
	x = x[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		y[i] += alpha * x[i]
		y[i+1] += alpha * x[i+1]
		y[i+2] += alpha * x[i+2]
		y[i+3] += alpha * x[i+3]
	}
	for ; i < n; i++ {
		y[i] += alpha * x[i]
	}
}

// swiGLU replaces gate with silu(gate)·up, SiLU being x·sigmoid(x) = x / (1 + e^-x). With
// simd, whole groups of four go through swiGLUAsm (the same bits, several times faster).
func swiGLU(gate, up []float32, simd bool) {
	up = up[:len(gate)]
	if n := len(gate) &^ 3; simd && n > 0 {
		swiGLUAsm(&gate[0], &up[0], n, &expTable)
		gate, up = gate[n:], up[n:]
	}
	for i, g := range gate {
		silu := float32(float64(g) / (1 + float64(exp32(-g))))
		gate[i] = silu * up[i]
	}
}

// softmaxScaled turns raw scores s into softmax(scale·s) in place, subtracting the maximum
// first so the exponentials cannot overflow. The sum of the exponentials runs in four float64
// lanes (element i into lane i mod 4, each lane in order; then (l0+l1)+(l2+l3), then the last
// len(s) mod 4 in order), so the SIMD kernels and the Go loops give the same bits. With simd the
// maximum, exponentials, sum and division go through the AVX2 kernels (a verify pass's extra
// rows spent a tenth of their time in the Go loops).
func softmaxScaled(s []float32, scale float32, simd bool) {
	m := float32(math.Inf(-1))
	done := 0
	if simd {
		done = len(s) &^ 7
		if done > 0 {
			m = maxAsm(&s[0], done)
		}
	}
	for _, v := range s[done:] {
		m = max(m, v)
	}
	done = 0
	if simd {
		done = len(s) &^ 3
		if done > 0 {
			expShiftedAsm(&s[0], done, m, scale, &expTable)
		}
	}
	for i := done; i < len(s); i++ {
		s[i] = exp32((s[i] - m) * scale)
	}
	var lanes [4]float64
	body := len(s) &^ 3
	if simd && body > 0 {
		sum4Asm(&s[0], body, &lanes)
	} else {
		for i := 0; i < body; i += 4 {
			lanes[0] += float64(s[i])
			lanes[1] += float64(s[i+1])
			lanes[2] += float64(s[i+2])
			lanes[3] += float64(s[i+3])
		}
	}
	sum := (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
	for _, e := range s[body:] {
		sum += float64(e)
	}
	total := float32(sum)
	done = 0
	if simd {
		done = len(s) &^ 7
		if done > 0 {
			divAsm(&s[0], done, total)
		}
	}
	for i := done; i < len(s); i++ {
		s[i] /= total
	}
}

// Constants of exp32's range reduction.
const (
	log2e = 1.4426950408889634
	ln2   = 0.6931471805599453
)

// exp32 returns e^x rounded to float32, within about one float32 ulp of the exact value, several
// times faster than math.Exp. It reduces x = n·ln2 + r with |r| ≤ ln2/2 in float64, evaluates a
// degree-7 Taylor polynomial for e^r (truncation error below 1e-8 relative), and scales by 2^n.
func exp32(x float32) float32 {
	switch {
	case x > 88.8:
		return float32(math.Inf(1))
	case x < -104:
		return 0
	case x != x:
		return x
	}
	// Every product is rounded on its own (the float64 conversions forbid fused multiply-adds,
	// which the compiler would otherwise use with GOAMD64=v3), so this and swiGLUAsm, which
	// does the same operations four lanes at a time, give the same bits on every build.
	xd := float64(x)
	n := math.Floor(float64(xd*log2e) + 0.5)
	r := xd - float64(n*ln2)
	p := float64(r*(1.0/5040)) + 1.0/720
	p = float64(r*p) + 1.0/120
	p = float64(r*p) + 1.0/24
	p = float64(r*p) + 1.0/6
	p = float64(r*p) + 1.0/2
	p = float64(r*p) + 1
	p = float64(r*p) + 1
	return float32(p * math.Float64frombits(uint64(int64(n)+1023)<<52))
}

// addBias adds bias to every row of the rows×len(bias) matrix x with leading dimension ld.
func addBias(x []float32, rows, ld int, bias []float32) {
	for r := range rows {
		row := x[r*ld : r*ld+len(bias)]
		for i, b := range bias {
			row[i] += b
		}
	}
}

// dotRows sets out[r] = Σ_p q[p]·k[r·ld+p] for r < len(out): one query against consecutive key
// rows of a cache block. With simd (AVX2 available and len(q) a multiple of 8) four rows at a
// time go through the assembly kernel.
func dotRows(q, k []float32, ld int, out []float32, simd bool) {
	n := len(q)
	r := 0
	if simd && n > 0 {
		var four [4]float32
		for ; r+4 <= len(out); r += 4 {
			_ = k[(r+3)*ld+n-1] // the kernel reads four full rows
			dotRows4Asm(&q[0], &k[r*ld], ld, n, &four)
			copy(out[r:r+4], four[:])
		}
	}
	for ; r < len(out); r++ {
		out[r] = dot(q, k[r*ld:r*ld+n])
	}
}

// axpyRows adds Σ_r p[r]·v[r·ld+j] to out[j] for j < len(out): probability-weighted value rows
// of a cache block, four rows at a time through the assembly kernel when simd is set.
func axpyRows(p, v []float32, ld int, out []float32, simd bool) {
	n := len(out)
	r := 0
	if simd && n > 0 {
		var four [4]float32
		for ; r+4 <= len(p); r += 4 {
			_ = v[(r+3)*ld+n-1]
			copy(four[:], p[r:r+4])
			axpyRows4Asm(&four, &v[r*ld], ld, n, &out[0])
		}
	}
	for ; r < len(p); r++ {
		axpy(p[r], v[r*ld:r*ld+n], out)
	}
}

// dotRowsHalf is dotRows over 16-bit key rows (k holds typ, BF16 or F16), widened inside the
// assembly kernel instead of into a float32 copy first; every score is the same bits as
// widening the rows and calling dotRows with simd set. Rows past the last multiple of four are
// widened one at a time into tmp (which must hold len(q)). Only for the SIMD path.
func dotRowsHalf(q []float32, k []uint16, ld int, out []float32, typ quant.Type, tmp []float32) {
	n := len(q)
	bf := typ == quant.BF16 // direct calls: through a func value, four would escape to the heap
	r := 0
	if n > 0 {
		var four [4]float32
		for ; r+4 <= len(out); r += 4 {
			_ = k[(r+3)*ld+n-1] // the kernel reads four full rows
			if bf {
				dotRows4BF16Asm(&q[0], &k[r*ld], ld, n, &four)
			} else {
				dotRows4F16Asm(&q[0], &k[r*ld], ld, n, &four)
			}
			copy(out[r:r+4], four[:])
		}
	}
	for ; r < len(out); r++ {
		linear.Widen(typ, k[r*ld:r*ld+n], tmp[:n])
		out[r] = dot(q, tmp[:n])
	}
}

// axpyRowsHalf is axpyRows over 16-bit value rows, bit-identical to widening them first and
// calling axpyRows with simd set; tmp must hold len(out).
func axpyRowsHalf(p []float32, v []uint16, ld int, out []float32, typ quant.Type, tmp []float32) {
	n := len(out)
	bf := typ == quant.BF16
	r := 0
	if n > 0 {
		var four [4]float32
		for ; r+4 <= len(p); r += 4 {
			_ = v[(r+3)*ld+n-1]
			copy(four[:], p[r:r+4])
			if bf {
				axpyRows4BF16Asm(&four, &v[r*ld], ld, n, &out[0])
			} else {
				axpyRows4F16Asm(&four, &v[r*ld], ld, n, &out[0])
			}
		}
	}
	for ; r < len(p); r++ {
		linear.Widen(typ, v[r*ld:r*ld+n], tmp[:n])
		axpy(p[r], tmp[:n], out)
	}
}

// expConsts is the constant table of the assembly exponentials (swiGLUAsm, expShiftedAsm),
// laid out as the assembly expects (byte offsets in the comments).
type expConsts struct {
	log2e, half, ln2 float64    // 0, 8, 16
	poly             [5]float64 // 24: exp32's coefficients 1/5040 ... 1/6
	one              float64    // 64
	_                float64    // 72: padding
	sign             [4]uint32  // 80: float32 sign bits
	bias             [4]int64   // 96: the float64 exponent bias, 1023
	hi, lo, inf      [4]float32 // 128, 144, 160: exp32's range limits and +Inf
}

var expTable = expConsts{
	log2e: log2e, half: 0.5, ln2: ln2,
	poly: [5]float64{1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6},
	one:  1,
	sign: [4]uint32{1 << 31, 1 << 31, 1 << 31, 1 << 31},
	bias: [4]int64{1023, 1023, 1023, 1023},
	hi:   [4]float32{88.8, 88.8, 88.8, 88.8},
	lo:   [4]float32{-104, -104, -104, -104},
	inf:  [4]float32{float32(math.Inf(1)), float32(math.Inf(1)), float32(math.Inf(1)), float32(math.Inf(1))},
}

// dotRowsHalf2 is dotRowsHalf for two queries over the same key rows (scores to out0 and out1,
// of equal length), each key widened once for both; the same bits as two dotRowsHalf calls.
func dotRowsHalf2(q0, q1 []float32, k []uint16, ld int, out0, out1 []float32, typ quant.Type, tmp []float32) {
	n := len(q0)
	q1, out1 = q1[:n], out1[:len(out0)]
	bf := typ == quant.BF16
	r := 0
	if n > 0 {
		var eight [8]float32
		for ; r+4 <= len(out0); r += 4 {
			_ = k[(r+3)*ld+n-1] // the kernel reads four full rows
			if bf {
				dotRows4x2BF16Asm(&q0[0], &q1[0], &k[r*ld], ld, n, &eight)
			} else {
				dotRows4x2F16Asm(&q0[0], &q1[0], &k[r*ld], ld, n, &eight)
			}
			copy(out0[r:r+4], eight[:4])
			copy(out1[r:r+4], eight[4:])
		}
	}
	for ; r < len(out0); r++ {
		linear.Widen(typ, k[r*ld:r*ld+n], tmp[:n])
		out0[r] = dot(q0, tmp[:n])
		out1[r] = dot(q1, tmp[:n])
	}
}

// axpyRowsHalf2 is axpyRowsHalf for two queries over the same value rows (weights p0 into out0,
// p1 into out1), each value widened once for both; the same bits as two axpyRowsHalf calls.
func axpyRowsHalf2(p0, p1 []float32, v []uint16, ld int, out0, out1 []float32, typ quant.Type, tmp []float32) {
	n := len(out0)
	p1, out1 = p1[:len(p0)], out1[:n]
	bf := typ == quant.BF16
	r := 0
	if n > 0 {
		var eight [8]float32
		for ; r+4 <= len(p0); r += 4 {
			_ = v[(r+3)*ld+n-1]
			copy(eight[:4], p0[r:r+4])
			copy(eight[4:], p1[r:r+4])
			if bf {
				axpyRows4x2BF16Asm(&eight, &v[r*ld], ld, n, &out0[0], &out1[0])
			} else {
				axpyRows4x2F16Asm(&eight, &v[r*ld], ld, n, &out0[0], &out1[0])
			}
		}
	}
	for ; r < len(p0); r++ {
		linear.Widen(typ, v[r*ld:r*ld+n], tmp[:n])
		axpy(p0[r], tmp[:n], out0)
		axpy(p1[r], tmp[:n], out1)
	}
}
