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
	// One pass over memory: the row goes by chunks small enough to stay in L1, and the first
	// chunk holding the maximum is searched again for its index (a batch of rows is far larger
	// than the caches, so a second pass over the row would read it from memory again).
	m, at := float32(math.Inf(-1)), -1
	for c := 0; c < n; c += argmaxChunk {
		e := min(c+argmaxChunk, n)
		if cm := maxBlocks(logits[c:e]); cm > m {
			m, at = cm, c
		}
	}
	for j, l := range logits[n:] {
		if l > m {
			m, at = l, n+j
		}
	}
	if at < 0 {
		return -1, float32(math.Inf(-1))
	}
	if at >= n {
		return int32(at), m // in the tail, after every chunk: the first such index
	}
	// The first index equal to the maximum in that chunk is the one the scalar loop keeps:
	// everything before it is smaller, nothing after it is larger (-0 and +0 compare equal).
	e := min(at+argmaxChunk, n)
	i := at + findEqual(logits[at:e], m)
	return int32(i), logits[i]
}

// argmaxChunk is how many logits argmax scans before comparing with the best so far: 8 KiB,
// a multiple of maxBlock.
const argmaxChunk = 2048

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
