package cpu

import (
	"math"

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
	var lanes [4]float64
	body := len(s) &^ 3
	if simd && body > 0 {
		expSumAsm(&s[0], body, m, scale, &expTable, &lanes)
	} else {
		for i := 0; i < body; i += 4 {
			for l := range lanes {
				s[i+l] = exp32((s[i+l] - m) * scale)
				lanes[l] += float64(s[i+l])
			}
		}
	}
	for i := body; i < len(s); i++ {
		s[i] = exp32((s[i] - m) * scale)
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
	// The range reduction rounds every product on its own (the float64 conversions forbid the
	// fused multiply-adds the compiler would otherwise use with GOAMD64=v3) and Horner's rule
	// runs in explicit fused multiply-adds, so this and the assembly (EXP32), which does the same
	// operations four lanes at a time, give the same bits on every build.
	xd := float64(x)
	n := math.Floor(float64(xd*log2e) + 0.5)
	r := xd - float64(n*ln2)
	p := math.FMA(r, 1.0/5040, 1.0/720)
	p = math.FMA(r, p, 1.0/120)
	p = math.FMA(r, p, 1.0/24)
	p = math.FMA(r, p, 1.0/6)
	p = math.FMA(r, p, 1.0/2)
	p = math.FMA(r, p, 1)
	p = math.FMA(r, p, 1)
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

// expConsts is the constant table of the assembly exponentials (EXP32 in swiGLUAsm and
// expSumAsm), each constant repeated in every lane so the instructions can read it from memory,
// laid out as the assembly expects (byte offsets in the comments).
type expConsts struct {
	log2e, half, ln2 [4]float64    // 0, 32, 64
	poly             [7][4]float64 // 96 ... 288: exp32's coefficients 1/5040 ... 1/2, 1
	bias             [4]float64    // 320: 1.5·2^52 + 1023 (the exponent bias): see EXP32
	sign             [4]uint32     // 352: float32 sign bits
	hi, lo, inf      [4]float32    // 368, 384, 400: exp32's range limits and +Inf
}

// lanes4 repeats v in four lanes.
func lanes4[T any](v T) [4]T { return [4]T{v, v, v, v} }

var expTable = expConsts{
	log2e: lanes4(log2e), half: lanes4(0.5), ln2: lanes4(ln2),
	poly: [7][4]float64{lanes4(1.0 / 5040), lanes4(1.0 / 720), lanes4(1.0 / 120), lanes4(1.0 / 24), lanes4(1.0 / 6), lanes4(0.5), lanes4(1.0)},
	bias: lanes4(1.5*(1<<52) + 1023),
	sign: lanes4[uint32](1 << 31),
	hi:   lanes4[float32](88.8),
	lo:   lanes4[float32](-104),
	inf:  lanes4(float32(math.Inf(1))),
}

// keyKernels are attendHalf's kernels for one 16-bit cache type, indexed by the queries a pass
// takes (see attn_amd64.s).
type keyKernels struct {
	dot  [5]func(q *float32, ldq int, k *uint16, ldk int, n int, cnt int, out *float32, ldo int) // 1, 2, 4
	axpy [3]func(p *float32, ldp int, v *uint16, ldv int, n int, cnt int, out *float32, ldo int) // 1, 2
}

// halfKernels are the keyKernels of BF16 (index 0) and F16 (index 1) caches.
var halfKernels = [2]keyKernels{
	{dot: [5]func(*float32, int, *uint16, int, int, int, *float32, int){1: dotKeys1BF16Asm, 2: dotKeys2BF16Asm, 4: dotKeys4BF16Asm},
		axpy: [3]func(*float32, int, *uint16, int, int, int, *float32, int){1: axpyKeys1BF16Asm, 2: axpyKeys2BF16Asm}},
	{dot: [5]func(*float32, int, *uint16, int, int, int, *float32, int){1: dotKeys1F16Asm, 2: dotKeys2F16Asm, 4: dotKeys4F16Asm},
		axpy: [3]func(*float32, int, *uint16, int, int, int, *float32, int){1: axpyKeys1F16Asm, 2: axpyKeys2F16Asm}},
}

// kernelsFor returns the keyKernels of a typ (BF16 or F16) cache.
func kernelsFor(typ quant.Type) *keyKernels {
	if typ == quant.BF16 {
		return &halfKernels[0]
	}
	return &halfKernels[1]
}

// dotKeys sets out[i·ldo+r] = q_i·k_r for the nq queries q_i = q[i·ldq : i·ldq+n] and the cnt
// keys k_r = k[r·ldk : r·ldk+n] of a 16-bit cache block (typ BF16 or F16), widened in
// registers, in passes of up to four queries. A score is the same bits whichever queries share
// its pass and wherever its key sits (see attn_amd64.s). n is a multiple of 8; AVX2 only.
func dotKeys(q []float32, ldq, nq int, k []uint16, ldk, n, cnt int, out []float32, ldo int, typ quant.Type) {
	if nq <= 0 || cnt <= 0 {
		return
	}
	_ = q[(nq-1)*ldq+n-1] // the kernels read whole rows
	_ = k[(cnt-1)*ldk+n-1]
	_ = out[(nq-1)*ldo+cnt-1]
	kk := kernelsFor(typ)
	for i := 0; i < nq; {
		t := 1
		if nq-i >= 4 {
			t = 4
		} else if nq-i >= 2 {
			t = 2
		}
		kk.dot[t](&q[i*ldq], ldq, &k[0], ldk, n, cnt, &out[i*ldo], ldo)
		i += t
	}
}

// widePays reports whether axpyKeys runs a pass of three queries over rows widened beforehand
// when nq queries are left: four go as two and two instead (not three and one: the one-query
// kernel's four FMA chains leave half the pipes idle), fewer than three never take one.
func widePays(nq int) bool { return nq >= 3 && nq != 4 }

// axpyKeys adds Σ_{r<cnt} p[i·ldp+r]·v_r to out[i·ldo : i·ldo+n] for the nq queries, v_r =
// v[r·ldv : r·ldv+n] the value rows of a 16-bit cache block. Each output element is one chain
// of fused multiply-adds over the keys in order, so it is the same bits whichever queries share
// its pass and however its keys are split among calls. Passes take two queries, widening the
// rows in registers, or, where wide holds the rows already widened to float32 (same layout;
// nil if not), three: the float32 kernel then reads them as they are. n is a multiple of 8;
// AVX2 only.
func axpyKeys(p []float32, ldp, nq int, v []uint16, wide []float32, ldv, n, cnt int, out []float32, ldo int, typ quant.Type) {
	if nq <= 0 || cnt <= 0 {
		return
	}
	_ = p[(nq-1)*ldp+cnt-1]
	_ = v[(cnt-1)*ldv+n-1]
	_ = out[(nq-1)*ldo+n-1]
	if wide != nil {
		_ = wide[(cnt-1)*ldv+n-1]
	}
	kk := kernelsFor(typ)
	for i := 0; i < nq; {
		left := nq - i
		if wide != nil && widePays(left) {
			axpyKeys3F32Asm(&p[i*ldp], ldp, &wide[0], ldv, n, cnt, &out[i*ldo], ldo)
			i += 3
			continue
		}
		t := min(left, 2)
		kk.axpy[t](&p[i*ldp], ldp, &v[0], ldv, n, cnt, &out[i*ldo], ldo)
		i += t
	}
}
