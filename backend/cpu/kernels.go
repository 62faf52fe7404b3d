package cpu

import "math"

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

// swiGLU replaces gate with silu(gate)·up, SiLU being x·sigmoid(x) = x / (1 + e^-x).
func swiGLU(gate, up []float32) {
	up = up[:len(gate)]
	for i, g := range gate {
		silu := float32(float64(g) / (1 + float64(exp32(-g))))
		gate[i] = silu * up[i]
	}
}

// softmaxScaled turns raw scores s into softmax(scale·s) in place, subtracting the maximum
// first so the exponentials cannot overflow.
func softmaxScaled(s []float32, scale float32) {
	m := float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v)
	}
	var sum float64
	for i, v := range s {
		e := exp32((v - m) * scale)
		s[i] = e
		sum += float64(e)
	}
	total := float32(sum)
	for i := range s {
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
	xd := float64(x)
	n := math.Floor(xd*log2e + 0.5)
	r := xd - n*ln2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
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
