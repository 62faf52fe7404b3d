package sampling

import (
	"math"
	"slices"
)

// LogSoftmaxAt returns log softmax(logits)[tok]: the natural-log probability of tok under the
// raw logits, before penalties, mask or temperature, as OpenAI's logprobs report it. It returns
// -Inf for a token outside the row.
func LogSoftmaxAt(logits []float32, tok int32) float32 {
	if tok < 0 || int(tok) >= len(logits) {
		return float32(math.Inf(-1))
	}
	maxLogit, logZ := logPartition(logits)
	return logits[tok] - maxLogit - logZ
}

// logPartition returns the largest logit and log Σ exp(logit - max).
func logPartition(logits []float32) (maxLogit, logZ float32) {
	_, maxLogit = argmax(logits)
	if math.IsInf(float64(maxLogit), 0) {
		return maxLogit, 0
	}
	// Exponentiate in fixed-size chunks so the scratch stays on the stack.
	var chunk [256]float32
	var z float64
	for start := 0; start < len(logits); start += len(chunk) {
		part := chunk[:min(len(chunk), len(logits)-start)]
		for i, l := range logits[start : start+len(part)] {
			part[i] = l - maxLogit
			if !(part[i] <= 0) { // NaN contributes nothing
				part[i] = -100
			}
		}
		expInPlace(part)
		for _, e := range part {
			z += float64(e)
		}
	}
	return maxLogit, float32(math.Log(z))
}

// TopLogprobs appends to ids and lps the k most likely tokens of logits (ties to the lower id),
// most likely first, with their log softmax under the raw logits (as LogSoftmaxAt). NaN logits
// are never listed.
func TopLogprobs(logits []float32, k int, ids []int32, lps []float32) ([]int32, []float32) {
	if k <= 0 || len(logits) == 0 {
		return ids, lps
	}
	maxLogit, logZ := logPartition(logits)
	top := topK(make([]scored, 0, k), logits, k, float32(math.Inf(-1)))
	slices.SortFunc(top, func(a, b scored) int {
		if ranksBelow(a, b) {
			return 1
		}
		if ranksBelow(b, a) {
			return -1
		}
		return 0
	})
	for _, c := range top {
		ids = append(ids, c.id)
		lps = append(lps, c.logit-maxLogit-logZ)
	}
	return ids, lps
}
