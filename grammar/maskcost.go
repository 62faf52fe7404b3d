package grammar

import (
	"errors"
	"slices"
	"time"
)

// Mask cost. A mask walks the vocabulary trie stepping the DFA, and a step costs the closure of
// the state's configurations, so a grammar with thousands of alternatives active at once (30,000
// `.+` rules) makes every mask cost seconds. Compiles refuse what cannot be masked within a
// budget (checkMaskCost), and a matcher's mask can be bounded by a deadline (FillMaskWithin),
// so one request's mask never holds a step for the others.

// ErrMaskDeadline is FillMaskWithin's error when the mask was not done by its deadline.
var ErrMaskDeadline = errors.New("grammar: token mask not computed within its deadline")

// ErrDFAExhausted is FillMaskWithin's error once the grammar's lazily built DFA has run out of
// states (Limits.MaxStates): its masks and its matcher could then disagree.
var ErrDFAExhausted = errors.New("grammar: automaton over its DFA state budget (the grammar is too ambiguous to follow)")

// errMaskOps stops a mask computation over its work budget (checkMaskCost).
var errMaskOps = errors.New("grammar: token mask over its work budget")

// maskAbort carries a stop through the walk as a panic: the walk is deep and hot, and nothing it
// leaves half-built is read (masks are cached only once complete; DFA states are exact).
type maskAbort struct{ err error }

// tick counts one unit of mask work (a trie node stepped, a configuration closed) and stops
// the computation when it is over its bounds. g.mu is held.
func (g *Grammar) tick() {
	g.ops++
	if g.ops&1023 != 0 || (g.opsMax == 0 && g.stopAt.IsZero()) {
		return
	}
	if g.opsMax > 0 && g.ops > g.opsMax {
		panic(maskAbort{errMaskOps})
	}
	if !g.stopAt.IsZero() && time.Now().After(g.stopAt) {
		panic(maskAbort{ErrMaskDeadline})
	}
}

// bounded runs f (under g.mu) with the given bounds, returning the error that stopped it.
func (g *Grammar) bounded(opsMax int64, stopAt time.Time, f func()) (err error) {
	g.ops, g.opsMax, g.stopAt = 0, opsMax, stopAt
	defer func() {
		g.opsMax, g.stopAt = 0, time.Time{}
		if r := recover(); r != nil {
			a, ok := r.(maskAbort)
			if !ok {
				panic(r)
			}
			if g.toks != nil {
				g.dropScratch()
			}
			err = a.err
		}
	}()
	f()
	return nil
}

// maskOfBounded computes (and caches) state s's mask under bounded's bounds. g.mu is held.
func (g *Grammar) maskOfBounded(opsMax int64, stopAt time.Time, states ...int32) error {
	return g.bounded(opsMax, stopAt, func() {
		for _, s := range states {
			g.takeScratch()
			g.maskOf(s)
			g.dropScratch()
		}
	})
}

// FillMaskWithin is FillMask bounded by a deadline: a mask not done by then is given up
// (ErrMaskDeadline) and mask is cleared; so is a mask of a grammar whose DFA ran out of states
// (ErrDFAExhausted), which the matcher might contradict. What the computation learned stays (DFA states), so
// a retry goes further; the grammar's lock is released as soon as it stops.
func (m *Matcher) FillMaskWithin(mask []uint64, deadline time.Time) error {
	g := m.g
	if s := m.cur(); s >= 0 {
		g.mu.Lock()
		var err error
		if g.states[s].mask == nil {
			err = g.maskOfBounded(0, deadline, s)
		}
		if err == nil && g.exhausted {
			err = ErrDFAExhausted
		}
		g.mu.Unlock()
		if err != nil {
			clear(mask[:g.vt.words])
			return err
		}
	}
	m.FillMask(mask)
	return nil
}

// Exhausted reports whether the grammar's DFA has refused a closure for want of states or for
// too many configurations: from then on its masks and Accept may disagree (a mask may offer what
// Accept refuses), so a caller fails the request with ErrDFAExhausted instead.
func (m *Matcher) Exhausted() bool {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	return m.g.exhausted
}

// Compile-time bounds on mask cost.
const (
	// maxStateConfigs bounds the configurations of a DFA state explored at compile time: each
	// step from the state closes that many, and a mask steps once per trie node it visits.
	maxStateConfigs = 4096
	// probeStates is how many DFA states from the start checkMaskCost explores.
	probeStates = 64
	// heavyConfigs: an explored state with more configurations has its mask computed at
	// compile time, within maxMaskOps with the start's.
	heavyConfigs = 256
	// maxMaskOps bounds the work of those masks (trie nodes stepped plus configurations
	// closed): about a second of CPU at most.
	maxMaskOps = 20_000_000
)

// checkMaskCost refuses a grammar whose masks would cost too much: it explores the DFA from the
// start (breadth first, probeStates states, one successor per distinct next byte), refusing a
// state of more than maxStateConfigs configurations, then computes the masks of the start and
// of the explored states wider than heavyConfigs within maxMaskOps units of work (they are
// cached: the first request's steps get them free). Masks of states beyond the explored ones
// are bounded at run time (FillMaskWithin).
func (g *Grammar) checkMaskCost() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	wide := func(n int) error {
		return errf("grammar has %d alternatives active at once (at most %d): a token mask would cost seconds at every step", n, maxStateConfigs)
	}
	seen := map[int32]bool{g.start: true}
	queue := []int32{g.start}
	for len(queue) > 0 && len(seen) < probeStates {
		s := queue[0]
		queue = queue[1:]
		ds := g.states[s]
		if n := len(ds.cfg); n > maxStateConfigs {
			return wide(n)
		}
		for c := 0; c < 256 && len(seen) < probeStates; c++ {
			if ds.next[c>>6]&(1<<(uint(c)&63)) == 0 {
				continue
			}
			if t := g.step(s, byte(c)); t > 0 && !seen[t] {
				seen[t] = true
				queue = append(queue, t)
			}
		}
	}
	if g.exhausted {
		return errf("grammar is too ambiguous to follow: a state of its automaton has over %d configurations (or it needs over %d states)", maxConfigs, g.maxStates)
	}
	var heavy []int32
	for s := range seen {
		if n := len(g.states[s].cfg); n > maxStateConfigs {
			return wide(n)
		} else if s != g.start && n > heavyConfigs {
			heavy = append(heavy, s)
		}
	}
	slices.Sort(heavy)
	if err := g.maskOfBounded(maxMaskOps, time.Time{}, append([]int32{g.start}, heavy...)...); errors.Is(err, ErrDFAExhausted) {
		return errf("grammar is too ambiguous to follow: a state of its automaton has over %d configurations (or it needs over %d states)", maxConfigs, g.maxStates)
	} else if err != nil {
		return errf("grammar's first token masks take over %d steps of work (the limit): too costly to mask at every token", maxMaskOps)
	}
	return nil
}
