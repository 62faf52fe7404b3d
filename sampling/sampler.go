package sampling

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Sampler picks the next token of one request. It is not safe for concurrent use; a request's
// steps are sequential.
type Sampler struct {
	params Params
	// seed selects the request's draws (Uniform(seed, step)); step counts the tokens accepted.
	seed uint64
	step uint32

	// penalized lists, once each, the tokens seen in the prompt or output (repetition penalty);
	// seenBits marks them for O(1) membership.
	penalized []int32
	seenBits  []uint64
	// generated lists, once each, the tokens generated so far; genCount[i] counts generated[i],
	// and genIndex maps a token to its index in both.
	generated []int32
	genCount  []int32
	genIndex  map[int32]int

	// scratch holds the buffers reused across steps.
	scratch Scratch
}

// Scratch is the space one sampling call works in, reused across calls: the candidates' ids and
// unnormalized probabilities (parallel slices, so the exponential runs over a contiguous array),
// a heap or sort buffer, the nucleus histogram and a copy of a row. Its zero value is ready; it
// is not safe for concurrent use.
type Scratch struct {
	ids     []int32
	weights []float32
	heap    []scored
	binMass []float64
	row     []float32
}

// History is the part of a request's generation that its penalties read: Seen lists, once
// each, the prompt and output tokens (repetition penalty); Generated lists, once each, the
// generated tokens and GenCounts[i] how often Generated[i] was generated (frequency and
// presence penalties).
type History struct {
	Seen, Generated, GenCounts []int32
}

// New returns the sampler for one request. prompt counts for the repetition penalty (as in
// Hugging Face and vLLM); frequency and presence penalties count generated tokens only (as in
// OpenAI). p should already have passed Validate.
func New(p Params, prompt []int32) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		// The global math/rand/v2 source is seeded from the OS at start-up, so unseeded requests
		// get independent streams without a system call each.
		seed = rand.Uint64()
	}
	s := &Sampler{params: p, seed: seed}
	if p.RepetitionPenalty != 1 {
		for _, tok := range prompt {
			s.markSeen(tok)
		}
	}
	return s
}

// Params returns the settings the sampler was created with.
func (s *Sampler) Params() Params { return s.params }

// Seed is the seed of the request's draws: Params().Seed, or the one drawn for an unseeded
// request.
func (s *Sampler) Seed() uint64 { return s.seed }

// Step is the number of tokens accepted so far: the step of the next draw.
func (s *Sampler) Step() uint32 { return s.step }

// History returns the penalties' view of the request so far. The slices are the sampler's:
// read-only, valid until the next Accept.
func (s *Sampler) History() History {
	return History{Seen: s.penalized, Generated: s.generated, GenCounts: s.genCount}
}

// Accept records a generated token for the penalties and moves to the next draw.
func (s *Sampler) Accept(tok int32) {
	if tok < 0 {
		return
	}
	s.step++
	if s.params.RepetitionPenalty != 1 {
		s.markSeen(tok)
	}
	if s.params.FrequencyPenalty != 0 || s.params.PresencePenalty != 0 {
		if s.genIndex == nil {
			s.genIndex = make(map[int32]int)
		}
		i, ok := s.genIndex[tok]
		if !ok {
			i = len(s.generated)
			s.genIndex[tok] = i
			s.generated = append(s.generated, tok)
			s.genCount = append(s.genCount, 0)
		}
		s.genCount[i]++
	}
}

func (s *Sampler) markSeen(tok int32) {
	if tok < 0 {
		return
	}
	w := int(tok) / 64
	if w >= len(s.seenBits) {
		s.seenBits = append(s.seenBits, make([]uint64, w+1-len(s.seenBits))...)
	}
	bit := uint64(1) << (uint(tok) % 64)
	if s.seenBits[w]&bit == 0 {
		s.seenBits[w] |= bit
		s.penalized = append(s.penalized, tok)
	}
}

// Sample returns the next token id for one row of logits (one float per vocabulary entry).
//
// allowed, when not nil, is a bitmask over token ids: bit i%64 of allowed[i/64] set means token i
// may be chosen. Tokens beyond the mask are not allowed, and a disallowed token is never
// returned. Sample returns -1 only when the mask allows no token of the row.
//
// Sample overwrites logits in place (penalties, mask, temperature); compute logprobs of the raw
// logits (LogSoftmaxAt, TopLogprobs) before calling it.
func (s *Sampler) Sample(logits []float32, allowed []uint64) int32 {
	return s.scratch.Sample(logits, &s.params, s.History(), nil, allowed, s.seed, s.step)
}

// Copy returns a copy of row in the scratch's own buffer (valid until the next Copy), for a
// caller that must sample a row it may not change.
func (sc *Scratch) Copy(row []float32) []float32 {
	if cap(sc.row) < len(row) {
		sc.row = make([]float32, len(row))
	}
	sc.row = sc.row[:len(row)]
	copy(sc.row, row)
	return sc.row
}

// Sample is Sampler.Sample without the sampler's state: it picks from logits by p (whose Seed is
// not read), penalizing by h, never choosing a token of ban or one that allowed excludes, and
// drawing with Uniform(seed, step). Equal inputs give equal picks, whatever else the caller is
// sampling.
//
// The steps run in this order: logit bias, penalties, ban, mask, greedy shortcut, temperature,
// top-k, softmax, top-p, min-p, draw. It overwrites logits in place.
func (sc *Scratch) Sample(logits []float32, p *Params, h History, ban []int32, allowed []uint64, seed uint64, step uint32) int32 {
	applyBias(logits, p.LogitBias)
	applyPenalties(logits, p, h)
	negInf := float32(math.Inf(-1))
	for _, id := range ban {
		if id >= 0 && int(id) < len(logits) {
			logits[id] = negInf
		}
	}
	if allowed != nil {
		applyMask(logits, allowed)
	}
	best, bestLogit := argmax(logits)
	if best < 0 {
		// Every allowed logit is -Inf or NaN: nothing ranks the allowed tokens, so take the first.
		return firstAllowed(len(logits), allowed, ban)
	}
	if p.IsGreedy() || math.IsInf(float64(bestLogit), 1) {
		return best
	}
	invT := 1 / p.Temperature
	sc.candidates(logits, p.TopK, bestLogit, invT)
	return sc.draw(p.TopP, p.MinP, Uniform(seed, step))
}

// Uniform is the random number in [0, 1) of draw step of the stream seed: a counter-based
// generator (SplitMix64's finalizer over seed and step), so a draw depends on nothing but the
// request's seed and how many tokens it generated before, and a device can compute the same
// number without carrying a generator's state.
func Uniform(seed uint64, step uint32) float64 {
	x := mix64(seed ^ mix64(uint64(step)+0x9e3779b97f4a7c15))
	return float64(x>>11) * (1.0 / (1 << 53))
}

// mix64 is SplitMix64's output function: a bijection of 64-bit words whose every output bit
// depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// applyBias adds each bias to its token's logit; -100 bans the token, and when any bias is +100
// every token not biased +100 is banned. Ids outside the row are ignored.
func applyBias(logits []float32, bias []Bias) {
	if len(bias) == 0 {
		return
	}
	negInf := float32(math.Inf(-1))
	forced := false
	for _, b := range bias {
		forced = forced || b.Value >= MaxBias && int(b.ID) < len(logits)
	}
	if forced {
		keep := make(map[int32]float32, len(bias))
		for _, b := range bias {
			if b.Value >= MaxBias && int(b.ID) < len(logits) {
				keep[b.ID] = logits[b.ID] + b.Value
			}
		}
		for i := range logits {
			logits[i] = negInf
		}
		for id, l := range keep {
			logits[id] = l
		}
		return
	}
	for _, b := range bias {
		switch {
		case int(b.ID) >= len(logits) || b.ID < 0:
		case b.Value <= -MaxBias:
			logits[b.ID] = negInf
		default:
			logits[b.ID] += b.Value
		}
	}
}

// applyPenalties adjusts the logits of the tokens in h; ids outside the row are ignored.
func applyPenalties(logits []float32, p *Params, h History) {
	if rp := p.RepetitionPenalty; rp != 1 {
		for _, tok := range h.Seen {
			if tok < 0 || int(tok) >= len(logits) {
				continue
			}
			if l := logits[tok]; l > 0 {
				logits[tok] = l / rp
			} else {
				logits[tok] = l * rp
			}
		}
	}
	freq, pres := p.FrequencyPenalty, p.PresencePenalty
	if freq == 0 && pres == 0 {
		return
	}
	for i, tok := range h.Generated {
		if tok >= 0 && int(tok) < len(logits) && i < len(h.GenCounts) {
			logits[tok] -= freq*float32(h.GenCounts[i]) + pres
		}
	}
}

// applyMask sets the logits of disallowed tokens to -Inf.
func applyMask(logits []float32, allowed []uint64) {
	negInf := float32(math.Inf(-1))
	for w := 0; w*64 < len(logits); w++ {
		var bits uint64
		if w < len(allowed) {
			bits = allowed[w]
		}
		if bits == math.MaxUint64 {
			continue
		}
		row := logits[w*64 : min(len(logits), w*64+64)]
		for b := range row {
			if bits&(1<<uint(b)) == 0 {
				row[b] = negInf
			}
		}
	}
}

// firstAllowed is the lowest id that allowed (nil: every id) permits and ban does not list, or -1.
func firstAllowed(vocab int, allowed []uint64, ban []int32) int32 {
	for id := range vocab {
		if allowed != nil {
			if id/64 >= len(allowed) {
				return -1
			}
			if allowed[id/64]&(1<<uint(id%64)) == 0 {
				continue
			}
		}
		if !slices.Contains(ban, int32(id)) {
			return int32(id)
		}
	}
	return -1
}

// pruneBelow is how far below the best token, in temperature-scaled logits, a token may sit
// before dropping it changes no probability noticeably: ln(1e7·V) leaves weights under 1e-7/V.
func pruneBelow(vocab int) float32 {
	return float32(math.Log(float64(max(vocab, 1))) + math.Log(1e7))
}

// candidates fills s.ids and s.weights with the tokens that top-k keeps, each weighted
// exp((logit - maxLogit)·invT), dropping tokens whose weight is negligible (see pruneBelow).
// The token at maxLogit has weight exactly 1.
func (s *Scratch) candidates(logits []float32, k int, maxLogit, invT float32) {
	floor := maxLogit - pruneBelow(len(logits))/invT
	ids, weights := s.ids[:0], s.weights[:0]
	if k > 0 && k < len(logits) {
		s.heap = topK(s.heap[:0], logits, k, floor)
		for _, c := range s.heap {
			ids = append(ids, c.id)
			weights = append(weights, (c.logit-maxLogit)*invT)
		}
	} else {
		for i, l := range logits {
			if l >= floor {
				ids = append(ids, int32(i))
				weights = append(weights, (l-maxLogit)*invT)
			}
		}
	}
	expInPlace(weights)
	s.ids, s.weights = ids, weights
}

// scored is a token with its logit, for top-k selection.
type scored struct {
	id    int32
	logit float32
}

// ranksBelow orders by logit, ties going to the lower id.
func ranksBelow(a, b scored) bool {
	return a.logit < b.logit || (a.logit == b.logit && a.id > b.id)
}

// topK appends the k highest logits at or above floor to dst, ties going to the lower id. It
// keeps a min-heap of the best k so far, so a typical token costs one comparison with its root.
func topK(dst []scored, logits []float32, k int, floor float32) []scored {
	h := dst[:0]
	for i, l := range logits {
		if !(l >= floor) {
			continue
		}
		c := scored{id: int32(i), logit: l}
		if len(h) < k {
			h = append(h, c)
			for j := len(h) - 1; j > 0; {
				parent := (j - 1) / 2
				if !ranksBelow(h[j], h[parent]) {
					break
				}
				h[j], h[parent] = h[parent], h[j]
				j = parent
			}
			continue
		}
		if !ranksBelow(h[0], c) {
			continue
		}
		h[0] = c
		for j := 0; ; {
			child := 2*j + 1
			if child >= len(h) {
				break
			}
			if r := child + 1; r < len(h) && ranksBelow(h[r], h[child]) {
				child = r
			}
			if !ranksBelow(h[child], h[j]) {
				break
			}
			h[j], h[child] = h[child], h[j]
			j = child
		}
	}
	return h
}

// draw applies top-p and min-p to the weighted candidates in s.ids and s.weights and draws one
// with u, uniform in [0, 1).
func (s *Scratch) draw(topP, minP float32, u float64) int32 {
	ids, weights := s.ids, s.weights
	switch {
	case topP < 1:
		ids, weights = s.nucleus(topP, minP)
	case minP > 0:
		// The best token has weight 1, so min-p compares weights with minP directly.
		ids, weights = keepAtLeast(ids, weights, minP)
	}
	var total float64
	for _, w := range weights {
		total += float64(w)
	}
	u *= total
	for i, w := range weights {
		u -= float64(w)
		if u < 0 {
			return ids[i]
		}
	}
	// Rounding can leave u a hair above zero after the last weight.
	return ids[len(ids)-1]
}

// keepAtLeast keeps, in place and in order, the candidates whose weight is at least minW (min-p:
// weights are relative to the best's).
func keepAtLeast(ids []int32, weights []float32, minW float32) ([]int32, []float32) {
	n := 0
	for i, w := range weights {
		if w >= minW {
			ids[n], weights[n] = ids[i], w
			n++
		}
	}
	return ids[:n], weights[:n]
}

// binShift sets the resolution of the nucleus histogram: weights are binned by their float32
// bits shifted right by binShift, which is monotonic in the weight and gives 2^(23-binShift)
// bins per power of two.
const binShift = 17

// nucleus returns the smallest set of most likely candidates whose probability reaches topP
// (ties going to the lower id), less any whose weight is below minP times the best's.
//
// Instead of sorting, it histograms the weights into fine logarithmic bins, finds the bin where
// the running mass from the top crosses topP, takes every token above it and sorts only that
// one bin: O(n) plus a small sort.
func (s *Scratch) nucleus(topP, minP float32) ([]int32, []float32) {
	ids, weights := s.ids, s.weights
	var total float64
	for _, w := range weights {
		total += float64(w)
	}
	target := float64(topP) * total
	// Tokens min-p drops can never be chosen; they still count in total above, because top-p is
	// measured on the distribution before min-p.
	if minP > 0 {
		ids, weights = keepAtLeast(ids, weights, minP)
	}
	const oneBits = 0x3f800000 // float32 1.0, the largest weight
	bin := func(w float32) int {
		return max(0, int(oneBits-int64(math.Float32bits(w)))>>binShift)
	}
	// Every weight is at least e^-pruneBelow, or 0 after underflow; clamp into the last bin.
	nBins := bin(float32(math.SmallestNonzeroFloat32)) + 1
	if cap(s.binMass) < nBins {
		s.binMass = make([]float64, nBins)
	}
	mass := s.binMass[:nBins]
	clear(mass)
	for _, w := range weights {
		mass[min(bin(w), nBins-1)] += float64(w)
	}
	var cum float64
	boundary := nBins - 1
	for b, m := range mass {
		if cum+m >= target {
			boundary = b
			break
		}
		cum += m
	}
	// Everything above the boundary bin is in; the boundary bin is sorted and taken as far as
	// the target needs. Kept tokens are compacted to the front of ids and weights.
	n := 0
	edge := s.heap[:0]
	for i, w := range weights {
		switch b := min(bin(w), nBins-1); {
		case b < boundary:
			ids[n], weights[n] = ids[i], w
			n++
		case b == boundary:
			edge = append(edge, scored{id: ids[i], logit: w})
		}
	}
	slices.SortFunc(edge, func(a, b scored) int {
		if ranksBelow(b, a) {
			return -1
		}
		if ranksBelow(a, b) {
			return 1
		}
		return 0
	})
	for _, c := range edge {
		if cum >= target && n > 0 {
			break
		}
		ids[n], weights[n] = c.id, c.logit
		cum += float64(c.logit)
		n++
	}
	s.heap = edge
	return ids[:n], weights[:n]
}
