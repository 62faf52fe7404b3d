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

// TokenLogprob is one entry of an OpenAI top_logprobs list.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// TopLogprobs returns the n most likely tokens of the raw logits with their log probabilities,
// most likely first (ties to the lower id).
func TopLogprobs(logits []float32, n int) []TokenLogprob {
	n = min(n, len(logits))
	if n <= 0 {
		return nil
	}
	maxLogit, logZ := logPartition(logits)
	best := topK(make([]scored, 0, n), logits, n, float32(math.Inf(-1)))
	out := make([]TokenLogprob, len(best))
	for i, c := range best {
		out[i] = TokenLogprob{ID: c.id, Logprob: c.logit - maxLogit - logZ}
	}
	slices.SortFunc(out, func(a, b TokenLogprob) int {
		switch {
		case a.Logprob > b.Logprob:
			return -1
		case a.Logprob < b.Logprob:
			return 1
		}
		return int(a.ID - b.ID)
	})
	return out
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
