package quant

import "math"

// ToF16 rounds f to IEEE half precision, to nearest with ties to even, as ggml's
// GGML_FP32_TO_FP16 does: overflow gives infinity, values below half the smallest subnormal give
// zero, and every NaN becomes the quiet NaN 0x7e00 with f's sign.
func ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff && man != 0:
		return sign | 0x7e00
	case exp == 0xff:
		return sign | 0x7c00
	}
	// e is the half-precision biased exponent; below 1 the value is subnormal in half precision.
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // below half the smallest subnormal even after rounding
		}
		// Subnormal: shift the full significand (with its implicit bit) right, rounding to even.
		m := man | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && r&1 == 1 {
		r++ // a carry into the exponent is the right result, up to infinity
	}
	return sign | uint16(r)
}

// FromF16 widens a half-precision value to float32 exactly; as in ggml, a NaN keeps its payload
// and comes out quiet.
func FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f && man != 0:
		return math.Float32frombits(sign | 0x7fc00000 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal: normalise the significand.
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// ToBF16 rounds f to bfloat16, to nearest with ties to even, as ggml's GGML_FP32_TO_BF16 does;
// a NaN keeps its top bits and is made quiet.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// FromBF16 widens a bfloat16 value to float32 exactly.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
