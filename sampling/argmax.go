package sampling

import "math"

// argmax returns the first index holding the largest logit, ignoring -Inf and NaN (-1 if none),
// and that logit. It is the greedy path of every decode step, run once per token over the whole
// vocabulary, so it uses a vector kernel where one exists; argmaxScalar is its definition.
func argmax(logits []float32) (int32, float32) {
	// The vector kernels take whole blocks; below a few blocks the scalar loop is as fast.
	if !haveVectorArgmax || len(logits) < 4*maxBlock {
		return argmaxScalar(logits)
	}
	n := len(logits) &^ (maxBlock - 1)
	m := maxBlocks(logits[:n])
	for _, l := range logits[n:] {
		if l > m {
			m = l
		}
	}
	if !(m > float32(math.Inf(-1))) {
		return -1, float32(math.Inf(-1))
	}
	// The first index equal to the maximum is the one the scalar loop keeps: everything before
	// it is smaller, nothing after it is larger (-0 and +0 compare equal in both).
	i := findEqual(logits[:n], m)
	if i < 0 {
		for j, l := range logits[n:] {
			if l == m {
				i = n + j
				break
			}
		}
	}
	return int32(i), logits[i]
}

// argmaxScalar is the reference argmax: one comparison per logit, the first of equal maxima
// kept, NaN and -Inf never chosen.
func argmaxScalar(logits []float32) (int32, float32) {
	best, bestLogit := int32(-1), float32(math.Inf(-1))
	for i, l := range logits {
		if l > bestLogit {
			best, bestLogit = int32(i), l
		}
	}
	return best, bestLogit
}
