package grammar

import "slices"

// localMask is the mask of a hole-rooted state: tokens accepted without
// leaving the frame (valid under any caller), and the trie subtrees whose
// tokens may leave it, which are walked again from each real state.
type localMask struct {
	acc  []int32
	bits []uint64 // acc as a bitset when it is large (then acc is nil)
	open []openSubtree
}

type openSubtree struct {
	tr     *trie
	node   int32  // node of tr whose subtree is context-dependent
	prefix []byte // bytes of its ancestors
}

// cachedMask is a cached token mask: base (shared, may be nil) plus add tokens,
// or a dense bitset.
type cachedMask struct {
	base  []uint64
	add   []int32
	dense []uint64
}

// bytes is what c holds of its own (base is shared).
func (c *cachedMask) bytes() int { return 48 + 8*len(c.dense) + 4*len(c.add) }

func (c *cachedMask) fill(dst []uint64) {
	switch {
	case c.dense != nil:
		copy(dst, c.dense)
	case c.base != nil:
		copy(dst, c.base)
	default:
		clear(dst)
	}
	setBits(dst, c.add)
}

// walk adds to g.toks every token of tr accepted from state s, stepping
// every byte (no shortcuts: the tests' reference walk).
func (g *Grammar) walk(tr *trie, s int32) { g.walkPlain(tr, 0, int32(len(tr.b)), s) }

// walkSub adds to g.toks every token in the subtree of trie node root
// accepted from state s, where s is the state after root's ancestors.
func (g *Grammar) walkSub(tr *trie, root int32, s int32) { g.walkPlain(tr, root, tr.end[root], s) }

// walkPlain walks the trie nodes [lo, hi) of tr, whole subtrees whose
// roots share lo's depth, from state s.
func (g *Grammar) walkPlain(tr *trie, lo, hi int32, s int32) {
	if cap(g.walkS) < tr.maxD+1 {
		g.walkS = make([]int32, tr.maxD+1)
	}
	st := g.walkS[:tr.maxD+1]
	if lo < hi {
		st[tr.d[lo]] = s
	}
	for i := lo; i < hi; {
		g.tick()
		d := tr.d[i]
		t := g.step(st[d], tr.b[i])
		if t == 0 {
			i = tr.end[i]
			continue
		}
		if id := tr.tok[i]; id >= 0 {
			g.toks = append(g.toks, id)
			if ds, ok := tr.dups[i]; ok {
				g.toks = append(g.toks, ds...)
			}
		}
		st[d+1] = t
		i++
	}
}

// holeRet marks a hole stack: it stands for whatever caller frames a real
// state has below its innermost frame.
const holeRet = -2

// Every configuration of a state inside a called rule usually shares one
// stack, and many states differ only in that stack (the same string inside
// the 1st, 2nd, ... array item). Such a state's mask is computed from the
// hole-rooted state with the same nodes: its tokens that never leave the
// frame are accepted whatever the stack (cached once for all stacks), and
// only the trie subtrees that may leave it are walked from the real state.

// localOf returns the hole-rooted twin of s, or -1 when s does not qualify.
func (g *Grammar) localOf(s int32) int32 {
	ds := g.states[s]
	if len(ds.cfg) == 0 || len(g.states)+4096 > g.maxStates {
		return -1
	}
	st := int32(uint32(ds.cfg[0]))
	if st == 0 || g.stacks[st].ret == holeRet {
		return -1
	}
	for _, c := range ds.cfg[1:] {
		if int32(uint32(c)) != st {
			return -1
		}
	}
	depth := g.stacks[st].depth
	h, ok := g.holes[depth]
	if !ok {
		h = int32(len(g.stacks))
		g.stacks = append(g.stacks, stackEnt{ret: holeRet, parent: -1, depth: depth})
		g.holes[depth] = h
	}
	seeds := make([]uint64, len(ds.cfg))
	for i, c := range ds.cfg {
		seeds[i] = pack(int32(c>>32), h)
	}
	l := g.closure(seeds)
	if l == 0 || g.states[l].popped {
		return -1
	}
	return l
}

// localMaskOf walks the vocabulary from hole-rooted state l, stopping at
// the first byte after which the frame may have ended.
func (g *Grammar) localMaskOf(l int32) *localMask {
	ls := g.states[l]
	if ls.local != nil {
		return ls.local
	}
	lm := &localMask{}
	g.toks = g.toks[:0]
	lm.bits, lm.acc = g.packToks(g.walkVocab(l, lm), g.toks, false)
	ls.local = lm
	n := 8*len(lm.bits) + 4*len(lm.acc)
	for _, u := range lm.open {
		n += 32 + len(u.prefix)
	}
	g.grow(n)
	return lm
}

// freeMin is how many string-body tokens the free first bytes of a state
// must cover before walkVocab takes them from the per-Compiler tables.
const freeMin = 4096

// walkVocab adds to g.toks the tokens accepted from s. With lm set (s is
// hole-rooted), trie subtrees after which the frame may have ended go to
// lm.unc instead. Inside strings most first bytes lead into the free string
// body, whose tokens are known per Compiler: those are returned as a fresh
// bitset (nil when not used) and only the other first bytes and the tokens
// that close the string are walked.
func (g *Grammar) walkVocab(s int32, lm *localMask) []uint64 {
	vt := g.vt
	var free [256]bool
	nFree := 0
	for c := 0; c < 256; c++ {
		x := vt.firstQ[c]
		if x < 0 || len(vt.inFirst[c]) == 0 {
			continue
		}
		if t := g.step(s, byte(c)); t != 0 {
			if ts := g.states[t]; !ts.popped && ts.bodyState == x {
				free[c] = true
				nFree += len(vt.inFirst[c])
			}
		}
	}
	tr := vt.trie
	if nFree < freeMin {
		g.walkRange(tr, 0, int32(len(tr.b)), s, lm)
		return nil
	}
	bits := slices.Clone(vt.str[bodyNormal].in)
	ct := vt.str[bodyNormal].close
	for c := 0; c < 256; c++ {
		if free[c] {
			if k := vt.closeKid[c]; k >= 0 {
				g.walkRange(ct, k, ct.end[k], s, lm)
			}
			continue
		}
		for _, id := range vt.inFirst[c] {
			bits[id>>6] &^= 1 << (uint(id) & 63)
		}
		if k := vt.rootKid[c]; k >= 0 {
			g.walkRange(tr, k, tr.end[k], s, lm)
		}
	}
	return bits
}

// walkRange walks the trie nodes [lo, hi) of tr, a run of whole subtrees of
// root children, from state s; see walkVocab for lm.
func (g *Grammar) walkRange(tr *trie, lo, hi int32, s int32, lm *localMask) {
	if cap(g.walkS) < tr.maxD+1 || cap(g.walkP) < tr.maxD+1 {
		g.walkS = make([]int32, tr.maxD+1)
		g.walkP = make([]byte, tr.maxD+1)
	}
	st, path := g.walkS[:tr.maxD+1], g.walkP[:tr.maxD+1]
	st[0] = s
	// From a total state every token spelling chars of a constrained string
	// body (trie.cons) is accepted; the walk starts at the root (depth 0).
	total := tr == g.vt.trie && g.states[s].total
	for i := lo; i < hi; {
		g.tick()
		if total && tr.cons[i] {
			g.toks = append(g.toks, tr.order[tr.pos[i]:tr.pos[tr.end[i]]]...)
			i = tr.end[i]
			continue
		}
		d := tr.d[i]
		t := g.step(st[d], tr.b[i])
		if t == 0 {
			i = tr.end[i]
			continue
		}
		ts := g.states[t]
		if lm != nil && ts.popped {
			lm.open = append(lm.open, openSubtree{tr: tr, node: i, prefix: slices.Clone(path[:d])})
			i = tr.end[i]
			continue
		}
		if ts.bodyState == bodyNormal && tr.plain[i] || ts.loop >= 0 && tr == g.vt.trie && int32(tr.h[i]) <= ts.run && g.inClass(ts.loop, i) {
			// inside a string, a subtree of bytes that loop on this state
			// (or of class chars no longer than its guaranteed run) keeps
			// it alive: the whole subtree is accepted
			g.toks = append(g.toks, tr.order[tr.pos[i]:tr.pos[tr.end[i]]]...)
			i = tr.end[i]
			continue
		}
		if id := tr.tok[i]; id >= 0 {
			g.toks = append(g.toks, id)
			if ds, ok := tr.dups[i]; ok {
				g.toks = append(g.toks, ds...)
			}
		}
		st[d+1] = t
		path[d] = tr.b[i]
		i++
	}
}

const sparseMax = 2048

func (g *Grammar) maskOf(s int32) *cachedMask {
	ds := g.states[s]
	if ds.mask != nil {
		return ds.mask
	}
	if parts := g.splitByStack(s); parts != nil {
		// Every part's mask is computed (and cached) before merging:
		// maskOf reuses g.toks as scratch.
		subs := make([]*cachedMask, len(parts))
		for i, p := range parts {
			subs[i] = g.maskOf(p)
		}
		ds.mask = mergeMasks(subs, g.vt.words)
		g.grow(ds.mask.bytes())
		return ds.mask
	}
	g.toks = g.toks[:0]
	m := &cachedMask{}
	if ds.bodyState >= 0 {
		st := &g.vt.str[ds.bodyState]
		g.walk(st.close, s)
		m.base = st.in
	} else if rem := g.charsLeft(ds); rem >= 0 {
		// inside a length-only string: tokens that stay inside depend only
		// on how many chars they spell; those that close it are walked
		cnt := g.vt.cnt
		m.base = cnt[min(int(rem), len(cnt)-1)]
		g.walk(g.vt.str[bodyNormal].close, s)
	} else if l := g.localOf(s); l >= 0 {
		lm := g.localMaskOf(l)
		g.toks = append(g.toks[:0], lm.acc...)
		m.base = lm.bits
		for _, u := range lm.open {
			rs := s
			for _, c := range u.prefix {
				if rs = g.step(rs, c); rs == 0 {
					break
				}
			}
			if rs != 0 {
				g.walkSub(u.tr, u.node, rs)
			}
		}
	} else {
		m.dense = g.walkVocab(s, nil)
	}
	m.dense, m.add = g.packToks(m.dense, g.toks, m.base != nil)
	ds.mask = m
	g.grow(m.bytes())
	return m
}

// packToks stores accepted tokens toks: as bits set in dense when the walk
// returned a bitset, else as a bitset of their own when there are many and
// no base to add them to, else as a list.
func (g *Grammar) packToks(dense []uint64, toks []int32, hasBase bool) ([]uint64, []int32) {
	if dense == nil && (hasBase || len(toks) <= sparseMax) {
		return nil, slices.Clone(toks)
	}
	if dense == nil {
		dense = make([]uint64, g.vt.words)
	}
	setBits(dense, toks)
	return dense, nil
}

// setBits sets bit t of dst for every t of toks.
func setBits(dst []uint64, toks []int32) {
	for _, t := range toks {
		dst[t>>6] |= 1 << (uint(t) & 63)
	}
}

// inClass reports whether every byte below trie node i is in classes[k].
func (g *Grammar) inClass(k int16, i int32) bool {
	for len(g.classSub) < len(g.classes) {
		g.classSub = append(g.classSub, nil)
	}
	sub := g.classSub[k]
	if sub == nil {
		sub = g.vt.classSubtrees(g.classes[k])
		g.classSub[k] = sub
	}
	return sub[i>>6]&(1<<(uint(i)&63)) != 0
}

// charsLeft returns how many more chars the length-only string that ds sits
// in (at a char boundary) may take, or -1 when ds is not such a state.
func (g *Grammar) charsLeft(ds *dfaState) int32 {
	if len(ds.cfg) != 1 {
		return -1
	}
	return g.nodes[int32(ds.cfg[0]>>32)].charsLeft
}

// A token is accepted from a set of configurations iff it is accepted from
// one of them, so a state's mask is the union of the masks of any cover of
// its configurations. States mixing several call frames (the remaining
// property names of an object next to the open-key rule it calls, or the
// ends of nested values) are split by stack: each part is a state of its
// own whose mask is cached and shared by every state containing it (the
// open-key part is the same at every position of a 100-property object),
// and single-frame parts take the stack-independent path of localOf.

// splitByStack returns the states made of s's configurations grouped by
// call stack, or nil when s has a single stack or cannot be split.
func (g *Grammar) splitByStack(s int32) []int32 {
	ds := g.states[s]
	if len(ds.cfg) < 2 || len(g.states)+4096 > g.maxStates {
		return nil
	}
	first := uint32(ds.cfg[0])
	multi := false
	for _, c := range ds.cfg[1:] {
		if uint32(c) != first {
			multi = true
			break
		}
	}
	if !multi {
		return nil
	}
	byStack := slices.Clone(ds.cfg)
	slices.SortFunc(byStack, func(a, b uint64) int {
		if x, y := uint32(a), uint32(b); x != y {
			if x < y {
				return -1
			}
			return 1
		}
		if a < b {
			return -1
		}
		if a > b {
			return 1
		}
		return 0
	})
	var parts []int32
	for i := 0; i < len(byStack); {
		j := i + 1
		for j < len(byStack) && uint32(byStack[j]) == uint32(byStack[i]) {
			j++
		}
		p := g.closure(byStack[i:j])
		if p == s || p == 0 {
			// the part's closure reaches every configuration (or the
			// budget is spent): no smaller cover exists this way
			return nil
		}
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
		i = j
	}
	return parts
}

// mergeMasks returns the union of subs.
func mergeMasks(subs []*cachedMask, words int) *cachedMask {
	var bases [][]uint64
	n := 0
	for _, c := range subs {
		switch {
		case c.dense != nil:
			bases = append(bases, c.dense)
		case c.base != nil:
			bases = append(bases, c.base)
		}
		n += len(c.add)
	}
	m := &cachedMask{}
	switch len(bases) {
	case 0:
	case 1:
		m.base = bases[0] // shared, never written
	default:
		m.dense = make([]uint64, words)
		for _, b := range bases {
			for i, w := range b {
				m.dense[i] |= w
			}
		}
	}
	adds := make([]int32, 0, n)
	for _, c := range subs {
		adds = append(adds, c.add...)
	}
	slices.Sort(adds)
	adds = slices.Compact(adds)
	if m.base == nil && m.dense == nil && len(adds) > sparseMax {
		m.dense = make([]uint64, words)
	}
	if m.dense != nil {
		setBits(m.dense, adds)
		return m
	}
	m.add = adds
	return m
}
