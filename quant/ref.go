package quant

import (
	"encoding/binary"
	"math"
)

// Block layouts, byte offsets within one block (ggml-common.h's structs, little-endian):
//
//	Q8_0 (34 bytes, 32 weights):  d f16 | qs int8[32]                  w = d*qs
//	Q4_0 (18 bytes, 32 weights):  d f16 | qs [16] (weight j in the low nibble of byte j,
//	                              weight j+16 in the high nibble)     w = d*(q-8)
//	Q4_K (144 bytes, 256 weights): d f16 | dmin f16 | scales [12] (eight 6-bit scales and eight
//	                              6-bit mins, see ScaleMinK4) | qs [128] (four 64-weight groups of
//	                              32 bytes: low nibbles the first 32, high nibbles the next 32)
//	                              w = d*sc*q - dmin*m for the 32-weight sub-block's sc, m
//	Q6_K (210 bytes, 256 weights): ql [128] | qh [64] | scales int8[16] | d f16
//	                              w = d*scales[k]*(q-32), q 6 bits, sub-blocks of 16 weights
//
// The block layouts of llama.cpp's quantizations, for the kernels that read blocks in place.
const (
	QK   = 32  // weights in a Q8_0 / Q4_0 block
	QKK  = 256 // weights in a K-quant super-block
	Q4KD = 0   // Q4_K: offset of d
	Q4KM = 2   // Q4_K: offset of dmin
	Q4KS = 4   // Q4_K: offset of the packed scales
	Q4KQ = 16  // Q4_K: offset of the nibbles
	Q6KL = 0   // Q6_K: offset of the low 4 bits
	Q6KH = 128 // Q6_K: offset of the high 2 bits
	Q6KS = 192 // Q6_K: offset of the int8 scales
	Q6KD = 208 // Q6_K: offset of d
)

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it is all zero.
const groupMaxEps = 1e-15

func f16at(b []byte, off int) float32 { return FromF16(binary.LittleEndian.Uint16(b[off:])) }

func putF16(b []byte, off int, f float32) { binary.LittleEndian.PutUint16(b[off:], ToF16(f)) }

// NearestInt rounds as ggml's nearest_int (what its quantizers, reference and activation, round with): the float-add trick, round to nearest even for
// |f| <= 2^22 (and the same wrapped bits as ggml outside that range).
func NearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// The reference quantizers below follow ggml's quantize_row_*_ref operation for operation, so
// that the bytes are llama.cpp's bit for bit; every float product that feeds a sum is wrapped in
// float32() because Go may otherwise fuse it into an FMA, which ggml's reference build does not.

// quantizeQ8_0 quantizes len(x) (a multiple of 32) weights into dst.
func quantizeQ8_0(x []float32, dst []byte) {
	for i := 0; i < len(x)/QK; i++ {
		xb, yb := x[i*QK:(i+1)*QK], dst[i*34:(i+1)*34]
		var amax float32
		for _, v := range xb {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, 0, d)
		for j, v := range xb {
			yb[2+j] = byte(int8(math.Round(float64(v * id))))
		}
	}
}

func dequantizeQ8_0(src []byte, y []float32) {
	for i := 0; i < len(y)/QK; i++ {
		b := src[i*34 : (i+1)*34]
		d := f16at(b, 0)
		for j := range QK {
			y[i*QK+j] = float32(int8(b[2+j])) * d
		}
	}
}

func quantizeQ4_0(x []float32, dst []byte) {
	for i := 0; i < len(x)/QK; i++ {
		xb, yb := x[i*QK:(i+1)*QK], dst[i*18:(i+1)*18]
		var amax, mx float32
		for _, v := range xb {
			if amax < abs32(v) {
				amax, mx = abs32(v), v
			}
		}
		d := mx / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, 0, d)
		for j := range QK / 2 {
			yb[2+j] = q4Level(xb[j]*id) | q4Level(xb[j+QK/2]*id)<<4
		}
	}
}

// q4Level is ggml's MIN(15, (int8_t)(v + 8.5f)): truncation toward zero, then capped.
func q4Level(v float32) byte {
	l := int8(int32(v + 8.5))
	return byte(min(15, l))
}

func dequantizeQ4_0(src []byte, y []float32) {
	for i := 0; i < len(y)/QK; i++ {
		b := src[i*18 : (i+1)*18]
		d := f16at(b, 0)
		for j := range QK / 2 {
			y[i*QK+j] = float32(int32(b[2+j]&0xf)-8) * d
			y[i*QK+j+QK/2] = float32(int32(b[2+j]>>4)-8) * d
		}
	}
}

// ScaleMinK4 unpacks sub-block j's 6-bit scale and min from a Q4_K block's 12 scale bytes: for
// j < 4 they are the low 6 bits of bytes j and j+4; for j >= 4 the low 4 bits come from byte j+4
// and the top 2 from the spare top bits of bytes j-4 (scale) and j (min).
func ScaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// makeQKX2 is ggml's make_qkx2_quants: an asymmetric fit x ~ scale*L - min with L in [0, nmax],
// searching nstep+1 trial scales for the least weighted squared error (use_mad false).
func makeQKX2(nmax int, x, weights []float32, l, laux []uint8, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	n := len(x)
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		mn = min32(mn, x[i])
		mx = max32(mx, x[i])
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		for i := range n {
			l[i] = 0
		}
		return 0, -mn
	}
	fmax := float32(nmax)
	iscale := fmax / (mx - mn)
	scale = 1 / iscale
	var bestError float32
	for i := range n {
		q := NearestInt(float32(iscale * (x[i] - mn)))
		l[i] = uint8(max(0, min(int32(nmax), q)))
		diff := float32(float32(scale*float32(l[i]))+mn) - x[i]
		bestError += float32(weights[i] * float32(diff*diff))
	}
	for is := 0; is <= nstep; is++ {
		iscale = (float32(rmin+float32(rdelta*float32(is))) + fmax) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i := range n {
			q := NearestInt(float32(iscale * (x[i] - mn)))
			q = max(0, min(int32(nmax), q))
			laux[i] = uint8(q)
			w := weights[i]
			fl := float32(q)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		d := float32(sumW*sumL2) - float32(sumL*sumL)
		if d > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / d
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / d
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := range n {
				diff := float32(float32(thisScale*float32(laux[i]))+thisMin) - x[i]
				curError += float32(weights[i] * float32(diff*diff))
			}
			if curError < bestError {
				copy(l[:n], laux[:n])
				bestError = curError
				scale = thisScale
				mn = thisMin
			}
		}
	}
	return scale, -mn
}

func quantizeQ4_K(x []float32, dst []byte) {
	var l, laux [QKK]uint8
	var weights [32]float32
	var mins, scales [8]float32
	for i := 0; i < len(x)/QKK; i++ {
		xb, yb := x[i*QKK:(i+1)*QKK], dst[i*144:(i+1)*144]
		var maxScale, maxMin float32
		for j := range 8 {
			xs := xb[32*j : 32*j+32]
			var sumX2 float32
			for _, v := range xs {
				sumX2 += float32(v * v)
			}
			avX := float32(math.Sqrt(float64(sumX2 / 32)))
			for k, v := range xs {
				weights[k] = avX + abs32(v)
			}
			scales[j], mins[j] = makeQKX2(15, xs, weights[:], l[32*j:32*j+32], laux[:32], -1, 0.1, 20)
			maxScale = max32(maxScale, scales[j])
			maxMin = max32(maxMin, mins[j])
		}
		var invScale, invMin float32
		if maxScale > 0 {
			invScale = 63 / maxScale
		}
		if maxMin > 0 {
			invMin = 63 / maxMin
		}
		sc := yb[Q4KS : Q4KS+12]
		for j := range 8 {
			ls := min(63, uint8(NearestInt(invScale*scales[j])))
			lm := min(63, uint8(NearestInt(invMin*mins[j])))
			if j < 4 {
				sc[j] = ls
				sc[j+4] = lm
			} else {
				sc[j+4] = ls&0xf | (lm&0xf)<<4
				sc[j-4] |= (ls >> 4) << 6
				sc[j] |= (lm >> 4) << 6
			}
		}
		putF16(yb, Q4KD, maxScale/63)
		putF16(yb, Q4KM, maxMin/63)
		dAll, mAll := f16at(yb, Q4KD), f16at(yb, Q4KM)
		for j := range 8 {
			s, m := ScaleMinK4(j, sc)
			d := dAll * float32(s)
			if d == 0 {
				continue
			}
			dm := mAll * float32(m)
			for k := range 32 {
				q := NearestInt((xb[32*j+k] + dm) / d)
				l[32*j+k] = uint8(max(0, min(15, q)))
			}
		}
		q := yb[Q4KQ:]
		for j := 0; j < QKK; j += 64 {
			for k := range 32 {
				q[j/2+k] = l[j+k] | l[j+k+32]<<4
			}
		}
	}
}

func dequantizeQ4_K(src []byte, y []float32) {
	for i := 0; i < len(y)/QKK; i++ {
		b := src[i*144 : (i+1)*144]
		d, mn := f16at(b, Q4KD), f16at(b, Q4KM)
		sc, q := b[Q4KS:Q4KS+12], b[Q4KQ:]
		out := y[i*QKK:]
		for j := range 4 {
			s1, m1 := ScaleMinK4(2*j, sc)
			s2, m2 := ScaleMinK4(2*j+1, sc)
			d1, dm1 := d*float32(s1), mn*float32(m1)
			d2, dm2 := d*float32(s2), mn*float32(m2)
			for k := range 32 {
				out[64*j+k] = float32(d1*float32(q[32*j+k]&0xf)) - dm1
				out[64*j+32+k] = float32(d2*float32(q[32*j+k]>>4)) - dm2
			}
		}
	}
}

// makeQX is ggml's make_qx_quants with rmse_type 1 and no importance weights (weights x^2): a
// symmetric fit x ~ scale*(L - nmax), L in [0, 2*nmax), over 19 trial scales.
func makeQX(nmax int, x []float32, l []int8) float32 {
	var mx, amax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	if amax < groupMaxEps {
		for i := range x {
			l[i] = 0
		}
		return 0
	}
	fmax := float32(nmax)
	clamp := func(q int32) int32 { return max(int32(-nmax), min(int32(nmax-1), q)) }
	iscale := -fmax / mx
	var sumLX, sumL2 float32
	for i, v := range x {
		q := clamp(NearestInt(iscale * v))
		l[i] = int8(q + int32(nmax))
		w := float32(v * v)
		fl := float32(q)
		sumLX += float32(float32(w*v) * fl)
		sumL2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + float32(0.1*float32(is))) / mx
		sumLX, sumL2 = 0, 0
		for _, v := range x {
			q := clamp(NearestInt(iscale * v))
			w := float32(v * v)
			fl := float32(q)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			for i, v := range x {
				l[i] = int8(clamp(NearestInt(iscale*v)) + int32(nmax))
			}
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

func quantizeQ6_K(x []float32, dst []byte) {
	var l [QKK]int8
	var scales [16]float32
	for i := 0; i < len(x)/QKK; i++ {
		xb, yb := x[i*QKK:(i+1)*QKK], dst[i*210:(i+1)*210]
		var maxScale, maxAbsScale float32
		for ib := range 16 {
			s := makeQX(32, xb[16*ib:16*ib+16], l[16*ib:16*ib+16])
			scales[ib] = s
			if a := abs32(s); a > maxAbsScale {
				maxAbsScale, maxScale = a, s
			}
		}
		if maxAbsScale < groupMaxEps {
			clear(yb)
			continue
		}
		iscale := -128 / maxScale
		putF16(yb, Q6KD, 1/iscale)
		for ib := range 16 {
			yb[Q6KS+ib] = byte(int8(min(127, NearestInt(iscale*scales[ib]))))
		}
		dAll := f16at(yb, Q6KD)
		for j := range 16 {
			d := dAll * float32(int8(yb[Q6KS+j]))
			if d == 0 {
				continue
			}
			for k := range 16 {
				q := NearestInt(xb[16*j+k] / d)
				l[16*j+k] = int8(max(-32, min(31, q)) + 32)
			}
		}
		ql, qh := yb[Q6KL:Q6KH], yb[Q6KH:Q6KS]
		for j := 0; j < QKK; j += 128 {
			for k := range 32 {
				a, b, c, e := uint8(l[j+k]), uint8(l[j+k+32]), uint8(l[j+k+64]), uint8(l[j+k+96])
				ql[j/2+k] = a&0xf | (c&0xf)<<4
				ql[j/2+k+32] = b&0xf | (e&0xf)<<4
				qh[j/4+k] = a>>4 | (b>>4)<<2 | (c>>4)<<4 | (e>>4)<<6
			}
		}
	}
}

func dequantizeQ6_K(src []byte, y []float32) {
	for i := 0; i < len(y)/QKK; i++ {
		b := src[i*210 : (i+1)*210]
		d := f16at(b, Q6KD)
		out := y[i*QKK:]
		for n := range 2 {
			ql, qh, sc := b[Q6KL+64*n:], b[Q6KH+32*n:], b[Q6KS+8*n:]
			for k := range 32 {
				is := k / 16
				q1 := int32(ql[k]&0xf|(qh[k]>>0&3)<<4) - 32
				q2 := int32(ql[k+32]&0xf|(qh[k]>>2&3)<<4) - 32
				q3 := int32(ql[k]>>4|(qh[k]>>4&3)<<4) - 32
				q4 := int32(ql[k+32]>>4|(qh[k]>>6&3)<<4) - 32
				out[128*n+k] = float32(d*float32(int8(sc[is]))) * float32(q1)
				out[128*n+k+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
				out[128*n+k+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
				out[128*n+k+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
			}
		}
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// min32 and max32 are C's comparisons (if x < m then m = x), not Go's NaN-propagating min/max.
func min32(a, b float32) float32 {
	if b < a {
		return b
	}
	return a
}

func max32(a, b float32) float32 {
	if b > a {
		return b
	}
	return a
}
