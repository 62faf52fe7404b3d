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
// nothing when no suffix recurs.
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
				follow := toks[start+n : min(start+n+k, len(toks))]
				return append(dst, follow...)
			}
		}
	}
	return dst
}

// draftCtl adapts one request's draft length to how many of its drafts were accepted: the
// length doubles while whole drafts are accepted, falls to one past the accepted prefix on a
// rejection, and after repeated drafts that gained nothing drafting pauses for a cooling period
// that doubles each time (so a workload without repeats pays one cheap one-token probe every
// few hundred steps at most).
type draftCtl struct {
	k       int // the next draft's length (0: not started)
	misses  int // consecutive verifications that accepted nothing
	cool    int // steps left without drafting
	backoff int // the next cooling period
}

// Cooling periods after drafts that gained nothing: the first, and the longest.
const (
	draftCoolMin = 16
	draftCoolMax = 512
	// draftMissLimit verifications in a row that accept nothing start a cooling period.
	draftMissLimit = 2
	// draftStart is the first draft's length.
	draftStart = 4
)

// length is how many tokens the next draft may hold (0 while cooling); maxK bounds it.
func (c *draftCtl) length(maxK int) int {
	if c.cool > 0 {
		c.cool--
		return 0
	}
	if c.k == 0 {
		c.k = draftStart
	}
	return min(c.k, maxK)
}

// update records that accepted of drafted tokens were accepted.
func (c *draftCtl) update(drafted, accepted, maxK int) {
	if drafted <= 0 {
		return
	}
	switch {
	case accepted >= drafted:
		c.k = min(max(2*drafted, c.k), maxK)
		c.misses = 0
		c.backoff = 0
	case accepted > 0:
		c.k = accepted + 1
		c.misses = 0
	default:
		c.k = 1
		if c.misses++; c.misses >= draftMissLimit {
			if c.backoff == 0 {
				c.backoff = draftCoolMin
			}
			c.cool = c.backoff
			c.backoff = min(2*c.backoff, draftCoolMax)
			c.misses = 0
		}
	}
}
