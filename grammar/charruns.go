package grammar

import (
	"math/bits"
	"slices"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// loopClass returns the printable ASCII chars other than '"' and '\\'
// (emitted as one literal byte each) on which char-DFA state i loops.
func loopClass(tr []chardfa.Edge, i int32) [2]uint64 {
	var cl [2]uint64
	for _, t := range tr {
		if t.To == i {
			pb := plainBits(t.Lo, t.Hi)
			cl[0], cl[1] = cl[0]|pb[0], cl[1]|pb[1]
		}
	}
	return cl
}

// runClass returns the largest set of printable ASCII chars other than '"'
// and '\\' that lead from a char-DFA state (transitions tr) to one target.
func runClass(tr []chardfa.Edge) [2]uint64 {
	byTo := map[int32][2]uint64{}
	var best [2]uint64
	for _, t := range tr {
		cl, pb := byTo[t.To], plainBits(t.Lo, t.Hi)
		cl[0], cl[1] = cl[0]|pb[0], cl[1]|pb[1]
		byTo[t.To] = cl
		if popcount2(cl) > popcount2(best) {
			best = cl
		}
	}
	return best
}

// classTarget returns the one state every char of cl leads to from char-DFA
// state i, or -1 when some char of cl is dead or they part ways.
func classTarget(tr []chardfa.Edge, cl [2]uint64) int32 {
	to, n := int32(-1), 0
	for _, t := range tr {
		pb := plainBits(t.Lo, t.Hi)
		k := popcount2([2]uint64{pb[0] & cl[0], pb[1] & cl[1]})
		if k == 0 {
			continue
		}
		if to >= 0 && t.To != to {
			return -1
		}
		to = t.To
		n += k
	}
	if n != popcount2(cl) {
		return -1
	}
	return to
}

// plainASCII is the printable ASCII chars other than '"' and '\\'.
var plainASCII = func() [2]uint64 {
	var cl [2]uint64
	for r := 0x20; r <= 0x7E; r++ {
		if r != '"' && r != '\\' {
			cl[r>>6] |= 1 << (uint(r) & 63)
		}
	}
	return cl
}()

// plainBits is the set of plainASCII chars in [lo,hi].
func plainBits(lo, hi rune) [2]uint64 {
	var cl [2]uint64
	for r := max(lo, 0x20); r <= min(hi, 0x7E); r++ {
		cl[r>>6] |= 1 << (uint(r) & 63)
	}
	return [2]uint64{cl[0] & plainASCII[0], cl[1] & plainASCII[1]}
}

// plainRuns returns, per state of d, how many plain ASCII chars (any of
// them, in any order) d surely accepts from it without dying, up to
// maxPlainRun (unboundedRem when the set of states reached keeps every
// plain char alive forever).
func plainRuns(d *chardfa.DFA) []int32 {
	n := len(d.Trans)
	runs := make([]int32, n)
	if d.Total {
		for i := range runs {
			runs[i] = unboundedRem
		}
		return runs
	}
	tgts := make([][]int32, n)
	in := make([]bool, n) // R_k: states that survive k plain chars
	for i, tr := range d.Trans {
		cov := 0
		for _, t := range tr {
			if max(t.Lo, 0x20) > min(t.Hi, 0x7E) {
				continue
			}
			cov += popcount2(plainBits(t.Lo, t.Hi))
			if !slices.Contains(tgts[i], t.To) {
				tgts[i] = append(tgts[i], t.To)
			}
		}
		in[i] = cov == popcount2(plainASCII)
	}
	// in now holds the states with every plain char defined; R_1 is the
	// states whose plain chars all lead to live states, and so on.
	live := make([]bool, n)
	for i := range live {
		live[i] = len(d.Trans[i]) > 0 || d.Accept[i]
	}
	cur := live
	for k := int32(1); ; k++ {
		next := make([]bool, n)
		changed := false
		for i := range next {
			if !cur[i] || !in[i] {
				continue
			}
			ok := true
			for _, t := range tgts[i] {
				if !cur[t] {
					ok = false
					break
				}
			}
			next[i] = ok
		}
		for i := range next {
			if cur[i] && !next[i] {
				runs[i] = k - 1
				changed = true
			}
		}
		if !changed {
			for i := range next {
				if next[i] {
					runs[i] = unboundedRem
				}
			}
			return runs
		}
		if k == maxPlainRun {
			for i := range next {
				if next[i] {
					runs[i] = k
				}
			}
			return runs
		}
		cur = next
	}
}

const maxPlainRun = 48

// totalStates returns the states of d from which every char leads to a
// state of the set again (the greatest such set): any char sequence is
// alive from them, so every token spelling constrained-string chars (from
// a char boundary) is accepted.
func totalStates(d *chardfa.DFA) []bool {
	n := len(d.Trans)
	in := make([]bool, n)
	if d.Total {
		for i := range in {
			in[i] = true
		}
		return in
	}
	preds := make([][]int32, n)
	for i, tr := range d.Trans {
		for _, t := range tr {
			preds[t.To] = append(preds[t.To], int32(i))
		}
	}
	// only states from which an accepting state is reachable count: a
	// dead sink takes every char but the string can never close
	live := make([]bool, n)
	var work []int32
	for i := range live {
		if d.Accept[i] {
			live[i] = true
			work = append(work, int32(i))
		}
	}
	for len(work) > 0 {
		j := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range preds[j] {
			if !live[p] {
				live[p] = true
				work = append(work, p)
			}
		}
	}
	for i, tr := range d.Trans {
		in[i] = live[i] && coversAll(tr)
		if !in[i] {
			work = append(work, int32(i))
		}
	}
	// a state stops being total once any successor is not: propagate
	// backwards from the states that are not (linear; a fixpoint sweep
	// would take one pass per char of a long counted string)
	for len(work) > 0 {
		j := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range preds[j] {
			if in[p] {
				in[p] = false
				work = append(work, p)
			}
		}
	}
	return in
}

// coversAll reports whether transitions tr define every char (anyChar).
func coversAll(tr []chardfa.Edge) bool {
	rs := slices.Clone(tr)
	slices.SortFunc(rs, func(a, b chardfa.Edge) int { return int(a.Lo - b.Lo) })
	for _, r := range chardfa.AnyChar {
		next := r.Lo
		for _, t := range rs {
			if t.Lo <= next && t.Hi >= next {
				next = t.Hi + 1
			}
		}
		if next <= r.Hi {
			return false
		}
	}
	return true
}

type runKey struct {
	st int32
	cl [2]uint64
}

// runLen returns how many chars of cl in a row char-DFA d surely accepts
// from state i (each step leading every char of cl to one state), or
// unboundedRem when that chain cycles.
func runLen(d *chardfa.DFA, i int32, cl [2]uint64, onPath map[int32]bool, memo map[runKey]int32) int32 {
	k := runKey{i, cl}
	if r, ok := memo[k]; ok {
		return r
	}
	if onPath[i] {
		return unboundedRem
	}
	if len(onPath) >= maxRunLen {
		return 0 // an underestimate: fewer shortcuts, never a wrong one
	}
	to := classTarget(d.Trans[i], cl)
	if to < 0 || len(d.Trans[to]) == 0 && !d.Accept[to] {
		// (a state with no way on is dead in the byte automaton)
		memo[k] = 0
		return 0
	}
	onPath[i] = true
	r := runLen(d, to, cl, onPath, memo)
	delete(onPath, i)
	if r < unboundedRem {
		r++
	}
	memo[k] = r
	return r
}

// maxRunLen bounds the chain (and recursion) followed by runLen.
const maxRunLen = 1024

func popcount2(cl [2]uint64) int { return bits.OnesCount64(cl[0]) + bits.OnesCount64(cl[1]) }

// classID interns a loop class of the grammar.
func (b *builder) classID(cl [2]uint64) int16 {
	for k, c := range b.g.classes {
		if c == cl {
			return int16(k)
		}
	}
	if len(b.g.classes) >= 1<<14 {
		return -1
	}
	b.g.classes = append(b.g.classes, cl)
	return int16(len(b.g.classes) - 1)
}

// nonASCIITo returns the state every non-ASCII char (U+0080..U+10FFFF, surrogates
// aside) leads to in transitions tr, or -1 when they do not all lead to one.
func nonASCIITo(tr []chardfa.Edge) int32 {
	to := int32(-1)
	next := rune(0x80)
	for _, t := range tr {
		if t.Hi < 0x80 {
			continue
		}
		if to >= 0 && t.To != to {
			return -1
		}
		lo := max(t.Lo, 0x80)
		if lo > next && !(next >= 0xD800 && lo <= 0xE000) {
			return -1 // a gap
		}
		to = t.To
		next = max(next, t.Hi+1)
	}
	if next <= chardfa.MaxRune {
		return -1
	}
	return to
}

func coversAllTo(tr []chardfa.Edge, to int32) bool {
	k := 0
	for _, r := range chardfa.AnyChar {
		lo := r.Lo
		for k < len(tr) && tr[k].To == to && tr[k].Lo == lo && lo <= r.Hi {
			lo = tr[k].Hi + 1
			k++
		}
		if lo <= r.Hi {
			return false
		}
	}
	return k == len(tr)
}
