package sampling

import "math"

// expInPlace replaces every x (all <= 0) with e^x to within a few float32 ulps; it is the
// softmax's inner loop, written as one loop over the slice because the body is too large for
// the compiler to inline a per-element call. Inputs below the float32 normal range give 0.
func expInPlace(xs []float32) {
	const (
		log2e = 1.44269504088896341
		ln2Hi = 0.693359375 // ln 2 split so n*ln2Hi is exact for |n| <= 127
		ln2Lo = -2.12194440e-4
	)
	for i, x := range xs {
		if x < -87 {
			xs[i] = 0
			continue
		}
		// x = n·ln2 + r with |r| <= ln2/2, so e^x = 2^n · e^r.
		n := int32(x*log2e - 0.5)
		fn := float32(n)
		r := x - fn*ln2Hi - fn*ln2Lo
		// Minimax polynomial for e^r on [-ln2/2, ln2/2] (Cephes expf coefficients).
		p := float32(1.9875691500e-4)
		p = p*r + 1.3981999507e-3
		p = p*r + 8.3334519073e-3
		p = p*r + 4.1665795894e-2
		p = p*r + 1.6666665459e-1
		p = p*r + 5.0000001201e-1
		xs[i] = (p*r*r + r + 1) * math.Float32frombits(uint32(n+127)<<23)
	}
}

// expNonPositive returns e^x for one x <= 0; see expInPlace.
func expNonPositive(x float32) float32 {
	v := [1]float32{x}
	expInPlace(v[:])
	return v[0]
}
