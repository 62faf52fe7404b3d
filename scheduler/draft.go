package scheduler

import "slices"

// Speculative decoding without a draft model (Config.Speculative): a decoding request's next
// tokens are guessed from its own prompt and output (prompt lookup, ngramDraft) or, under a
// grammar that admits exactly one continuation, from that continuation (DraftConstraint), and
// verified in the request's next forward pass (spec.go). draftCtl sizes each request's guesses.

// Speculative decoding modes (Config.Speculative).
const (
	// SpeculativeOff decodes one token per step.
	SpeculativeOff = "off"
	// SpeculativeNgram drafts by prompt lookup (and grammar jump-forward) and verifies the drafts
	// in one forward pass.
	SpeculativeNgram = "ngram"
)

// DefaultMaxDraft is the longest draft of one request in one step (--speculative-max-draft).
const DefaultMaxDraft = 8

// MaxDraftLimit bounds Config.MaxDraft: a verify chunk keeps all its logits rows on the host.
const MaxDraftLimit = 64

// Prompt lookup matches the last ngramMax tokens first, then shorter suffixes down to ngramMin.
const (
	ngramMax = 3
	ngramMin = 1
)

// ngramDraft appends to dst at most k tokens: those that followed the latest earlier occurrence
// in toks of toks' last n tokens, for the largest n in [minN, maxN] that has one. It appends
// nothing when no suffix recurs. Where the occurrence's successors reach the end of toks, the
// draft goes on copying its own tokens: toks repeats with the occurrence's period, and a run
// that repeats (a list, a table, a loop of a small model) is guessed as far as k allows instead
// of one period at a time.
//
// The draft is no longer than the match: the number of tokens, n or more, that end toks and
// also end at the occurrence. A match of one or two tokens is often chance (a common token, an
// indent) and its continuation fails at once; one that has agreed for dozens of tokens is a copy
// under way and goes on far more often. So the evidence sets the length, as suffix decoding does
// (vLLM's suffix proposer sizes drafts by its prefix match); draftCtl then trims it to what pays.
func ngramDraft(dst, toks []int32, k, maxN, minN int) []int32 {
	if k <= 0 {
		return dst
	}
	for n := min(maxN, len(toks)-1); n >= max(minN, 1); n-- {
		suffix := toks[len(toks)-n:]
		// The occurrence must end before the suffix starts to have a successor that is not part
		// of the suffix itself; the latest one is the likeliest to continue alike.
		for start := len(toks) - n - 1; start >= 0; start-- {
			if toks[start] == suffix[0] && slices.Equal(toks[start:start+n], suffix) {
				// Grow the match backwards, as far as it can bound the draft.
				m := n
				for m < k && start-1-(m-n) >= 0 && toks[start-1-(m-n)] == toks[len(toks)-1-m] {
					m++
				}
				base := len(dst)
				for i := range min(k, m) {
					if p := start + n + i; p < len(toks) {
						dst = append(dst, toks[p])
					} else {
						dst = append(dst, dst[base+p-len(toks)])
					}
				}
				return dst
			}
		}
	}
	return dst
}

// draftCtl sizes one request's drafts by what they are worth: it estimates the chance that
// a draft token is accepted (given the ones before it were) from the request's recent
// verifications, and picks the length that maximizes the expected tokens per unit of step time
// (bestDraft) under the step cost the scheduler measures. When no length pays, the request
// decodes plainly and the draft it would have made is kept as a shadow: the tokens it emits
// next are checked against it, which costs no forward work, and the outcome counts as a
// verification. So the estimate keeps following the output while drafting is off, and drafting
// resumes on the step after the output starts repeating (a preamble, then a copy of the prompt)
// instead of waiting out a blind pause. For greedy decoding a shadow is accepted exactly as the
// draft would have been; for sampled output a shadow token matches with the probability the
// target gives it, which is the chance speculative sampling accepts a draft token.
type draftCtl struct {
	acc, rej float64 // decayed counts of accepted draft tokens and of rejected drafts
	// shadow is the pending shadow draft (empty when none), matched how many of its tokens the
	// request has emitted so far.
	shadow  []int32
	matched int
}

// shadowMax bounds a shadow draft: a short one is settled within a few tokens, so the estimate
// turns as soon as the output does.
const shadowMax = 2

// draftDecay weighs the verifications before the last one: recent ones count most.
const draftDecay = 0.8

// draftGain is how much more a draft must be expected to yield per unit of step time than a
// plain decode, so noise in the estimates does not make drafting a loss.
const draftGain = 1.03

// alpha is the estimated chance that a draft token is accepted (a prior of one accepted and
// one rejected: 0.5 before any verification).
func (c *draftCtl) alpha() float64 { return (c.acc + 1) / (c.acc + c.rej + 2) }

// length is how many tokens the next draft may hold (0: decode plainly, and shadow the draft);
// maxK bounds it and rho is the step cost of one more token relative to the step without it
// (see stepCost). A pending shadow is dropped when drafting resumes.
func (c *draftCtl) length(maxK int, rho float64) int {
	if maxK <= 0 {
		return 0
	}
	k := bestDraft(c.alpha(), rho, maxK)
	if k > 0 {
		c.shadow = c.shadow[:0]
	}
	return k
}

// watching reports whether a shadow draft waits for the request's next tokens.
func (c *draftCtl) watching() bool { return len(c.shadow) > 0 }

// watch makes d, a draft that is not verified, the shadow (an empty d makes none). d may
// alias c.shadow's storage.
func (c *draftCtl) watch(d []int32) {
	c.shadow, c.matched = d, 0
}

// observe checks tok, the request's next emitted token, against the shadow draft; the shadow
// counts as a verification of its length once a token differs or all of it matched.
func (c *draftCtl) observe(tok int32) {
	if len(c.shadow) == 0 {
		return
	}
	if tok == c.shadow[c.matched] {
		if c.matched++; c.matched < len(c.shadow) {
			return
		}
	}
	c.update(len(c.shadow), c.matched)
	c.shadow = c.shadow[:0]
}

// update records that accepted of drafted tokens were accepted.
func (c *draftCtl) update(drafted, accepted int) {
	if drafted <= 0 {
		return
	}
	c.acc = c.acc*draftDecay + float64(accepted)
	c.rej *= draftDecay
	if accepted < drafted {
		c.rej++
	}
}

// bestDraft is the draft length k in [0, maxK] that maximizes the expected tokens one step
// emits, 1 + alpha + ... + alpha^k, per unit of its cost, 1 + rho·k (a plain decode: 1 per 1);
// 0 unless some k beats a plain decode by draftGain.
func bestDraft(alpha, rho float64, maxK int) int {
	best, bestRatio := 0, draftGain
	e, p := 1.0, 1.0
	for k := 1; k <= maxK; k++ {
		p *= alpha
		e += p
		if r := e / (1 + rho*float64(k)); r > bestRatio {
			best, bestRatio = k, r
		}
	}
	return best
}

// stepCost models a decode step's time as a + b·tokens, fitted by decayed least squares over
// recent steps that ran only generated tokens (decodes and drafts), so draft lengths follow what
// an extra token costs on this device and model: next to nothing where the weights' reads
// dominate (large models on CPUs, GPUs), nearly a whole step where the arithmetic does.
type stepCost struct {
	s, sx, sy, sxx, sxy float64
}

// stepCostDecay weighs older steps: the fit follows about the last hundred.
const stepCostDecay = 0.99

// stepCostPrior is rho before the fit has steps of different sizes to go by, and what it is
// drawn toward while they are few (stepCostPriorWeight).
const stepCostPrior = 0.25

// stepCostPriorWeight is how much evidence about the slope the prior counts as, in units of the
// steps' decayed spread of sizes, Σw·(n - n̄)²: a few two-token verifications among decodes
// (spread ~1 each) move rho only part of the way to their fit. A bare regression over them
// followed the noise of a handful of steps: a first verification that a neighbour's work made
// 1.6x a decode (rho 0.6) held drafts at one token for the next dozen steps.
const stepCostPriorWeight = 4

// add records a step of n tokens that took sec seconds.
func (c *stepCost) add(n int, sec float64) {
	x := float64(n)
	c.s = c.s*stepCostDecay + 1
	c.sx = c.sx*stepCostDecay + x
	c.sy = c.sy*stepCostDecay + sec
	c.sxx = c.sxx*stepCostDecay + x*x
	c.sxy = c.sxy*stepCostDecay + x*sec
}

// rho is the cost of one more token in a step of n tokens relative to that step's cost, in
// [0, 1]: the fit's, drawn toward stepCostPrior by stepCostPriorWeight.
func (c *stepCost) rho(n int) float64 {
	den := c.s*c.sxx - c.sx*c.sx
	if c.s < 2 || den <= 1e-9*c.s*c.sxx {
		return stepCostPrior // every step so far had the same size
	}
	b := (c.s*c.sxy - c.sx*c.sy) / den
	a := (c.sy - b*c.sx) / c.s
	b, a = max(b, 0), max(a, 0)
	fit := stepCostPrior
	if a+b*float64(n) > 0 {
		fit = min(1, b/(a+b*float64(n)))
	}
	spread := den / c.s // Σw·(n - n̄)²
	return (stepCostPriorWeight*stepCostPrior + spread*fit) / (stepCostPriorWeight + spread)
}
