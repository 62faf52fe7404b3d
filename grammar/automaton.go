package grammar

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// The grammar is a recursive transition network over bytes: nodes with byte
// range edges, epsilon edges, rule calls and rule ends. It is determinized
// lazily: a DFA state is the set of (node, call stack) configurations after
// a byte prefix, with stacks hash-consed, so a DFA state fully determines
// what may follow and every per-state token mask can be cached.

type edge struct {
	lo, hi byte
	to     int32
}

// node holds no pointers (its edges are ranges of Grammar.edges and
// Grammar.eps), so a large cached grammar costs the garbage collector
// nothing to scan.
type node struct {
	e0, e1    int32 // edges: Grammar.edges[e0:e1]
	p0, p1    int32 // epsilon edges: Grammar.eps[p0:p1]
	call      int32 // rule called from here (-1 none); continues at ret
	ret       int32
	final     bool // end of its rule
	bodyState int8 // free-string body substate, or -1
	// loop >= 0: index into Grammar.classes of printable ASCII chars (each
	// one literal byte) of which this char-string node accepts any run of
	// up to run chars (unboundedRem: it loops on them)
	loop int16
	// charsLeft >= 0: a char boundary of a length-only string that may still
	// take charsLeft chars (unboundedRem: any number); see vocabTables.cnt
	charsLeft int32
	run       int32
	// total: a char-string node from which every char, again and again,
	// keeps the string alive (see totalStates)
	total bool
}

const unboundedRem = 1 << 30

type stackEnt struct {
	ret, parent, depth int32
}

type dfaState struct {
	cfg       []uint64
	accept    bool
	popped    bool // a hole frame (see holeStack) ended: what follows depends on the caller
	bodyState int8
	loop      int16     // single configuration on a node taking runs of an ASCII class (node.loop), or -1
	run       int32     // node.run of that node
	total     bool      // single configuration on a node.total node
	next      [4]uint64 // bytes with an outgoing edge
	mask      *cachedMask
	local     *localMask // for hole-rooted states: the context-independent part of the mask
}

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

const maxStackDepth = 200

// Grammar is a compiled grammar; it is safe for concurrent use by many
// matchers. Its language is fixed at compile time; the lazily built DFA and
// mask caches behind it are guarded by mu.
type Grammar struct {
	vt      *vocabTables
	nodes   []node
	edges   []edge
	eps     []int32
	rules   []int32     // rule start nodes; rule 0 is the root
	classes [][2]uint64 // byte classes of node.loop
	// classSub[k]: trie nodes below which every byte is in classes[k]
	// (from vocabTables.classSubtrees, fetched on first use)
	classSub [][]uint64

	size atomic.Int64 // bytes held, growing with the chardfa.DFA (see Bytes)

	mu        sync.Mutex
	stacks    []stackEnt
	stackIdx  map[[2]int32]int32
	holes     map[int32]int32 // stack depth -> hole stack of that depth
	states    []*dfaState
	stateIdx  map[string]int32
	trans     [][]int32 // pages of transPage rows: [row%transPage*256+byte] -> state, -1 unknown, 0 dead
	rowOf     []int32   // state -> its row in trans, -1 before the first step from it
	nrows     int32
	maxStates int
	start     int32

	// scratch, guarded by mu
	work  []uint64
	out   []uint64
	seen  map[uint64]struct{}
	key   []byte
	walkS []int32
	walkP []byte
	toks  []int32
}

// transPage is how many states share one page of the transition table (a
// single growing slice would be copied over and over as states are added).
const transPage = 16

// stateBytes approximates a dfaState's fixed cost: the struct, its pointer
// in states and its stateIdx entry.
const stateBytes = 160

// grow records n more bytes held by g.
func (g *Grammar) grow(n int) { g.size.Add(int64(n)) }

// Bytes is about how much memory g holds: its automaton, and the DFA
// states and masks matchers have made so far.
func (g *Grammar) Bytes() int64 { return g.size.Load() }

func pack(n, s int32) uint64 { return uint64(uint32(n))<<32 | uint64(uint32(s)) }

func (g *Grammar) initDFA(maxStates int) {
	g.stacks = []stackEnt{{ret: -1, parent: -1}}
	g.stackIdx = map[[2]int32]int32{}
	g.holes = map[int32]int32{}
	g.stateIdx = map[string]int32{}
	g.seen = map[uint64]struct{}{}
	g.maxStates = maxStates
	dead := &dfaState{bodyState: -1, mask: &cachedMask{}}
	g.states = []*dfaState{dead}
	g.trans, g.rowOf = nil, []int32{-1}
	g.start = g.closure([]uint64{pack(g.rules[0], 0)})
}

func (g *Grammar) push(ret, parent int32) int32 {
	k := [2]int32{ret, parent}
	if i, ok := g.stackIdx[k]; ok {
		return i
	}
	i := int32(len(g.stacks))
	g.stacks = append(g.stacks, stackEnt{ret: ret, parent: parent, depth: g.stacks[parent].depth + 1})
	g.stackIdx[k] = i
	return i
}

// closure returns the DFA state for the epsilon closure of seeds.
func (g *Grammar) closure(seeds []uint64) int32 {
	out := g.out[:0]
	if len(g.seen) > 256 {
		// clearing costs the map's capacity, not its size: drop a grown one
		g.seen = make(map[uint64]struct{}, 64)
	} else {
		clear(g.seen)
	}
	work := append(g.work[:0], seeds...)
	accept, popped := false, false
	for len(work) > 0 {
		c := work[len(work)-1]
		work = work[:len(work)-1]
		if _, ok := g.seen[c]; ok {
			continue
		}
		g.seen[c] = struct{}{}
		nd, st := int32(c>>32), int32(uint32(c))
		n := &g.nodes[nd]
		if n.e1 > n.e0 {
			out = append(out, c)
		}
		for _, e := range g.eps[n.p0:n.p1] {
			work = append(work, pack(e, st))
		}
		if n.call >= 0 && g.stacks[st].depth < maxStackDepth {
			work = append(work, pack(g.rules[n.call], g.push(n.ret, st)))
		}
		if n.final {
			switch {
			case st == 0:
				accept = true
			case g.stacks[st].ret == holeRet:
				popped = true
			default:
				se := g.stacks[st]
				work = append(work, pack(se.ret, se.parent))
			}
		}
	}
	g.work = work
	g.out = out
	if len(out) == 0 && !accept && !popped {
		return 0
	}
	slices.Sort(out)
	key := g.key[:0]
	var flags byte
	if accept {
		flags |= 1
	}
	if popped {
		flags |= 2
	}
	key = append(key, flags)
	for _, c := range out {
		key = binary.LittleEndian.AppendUint64(key, c)
	}
	g.key = key
	if i, ok := g.stateIdx[string(key)]; ok {
		return i
	}
	if len(g.states) >= g.maxStates {
		return 0 // over budget: refuse rather than accept too much
	}
	ds := &dfaState{cfg: slices.Clone(out), accept: accept, popped: popped, bodyState: -2, loop: -1}
	if len(out) == 1 {
		n := &g.nodes[int32(out[0]>>32)]
		ds.loop, ds.run, ds.total = n.loop, n.run, n.total
	}
	for _, c := range out {
		n := &g.nodes[int32(c>>32)]
		for _, e := range g.edges[n.e0:n.e1] {
			for b := int(e.lo); b <= int(e.hi); b++ {
				ds.next[b>>6] |= 1 << (uint(b) & 63)
			}
		}
		if ds.bodyState == -2 {
			ds.bodyState = n.bodyState
		} else if ds.bodyState != n.bodyState {
			ds.bodyState = -1
		}
	}
	if ds.bodyState == -2 {
		ds.bodyState = -1
	}
	i := int32(len(g.states))
	g.states = append(g.states, ds)
	g.stateIdx[string(key)] = i
	g.grow(stateBytes + 8*len(out) + len(key))
	g.rowOf = append(g.rowOf, -1)
	return i
}

// newRow gives state s a row of transitions, all unknown. Rows are made
// on the first step from a state, not when it is created: most states a
// mask walk creates (after a token's last byte) are never stepped from.
func (g *Grammar) newRow(s int32) int32 {
	r := g.nrows
	g.nrows++
	if r%transPage == 0 {
		pg := make([]int32, transPage*256)
		g.grow(4 * len(pg))
		for k := range pg {
			pg[k] = -1
		}
		g.trans = append(g.trans, pg)
	}
	g.rowOf[s] = r
	return r
}

// step is the DFA transition on byte b.
func (g *Grammar) step(s int32, b byte) int32 {
	r := g.rowOf[s]
	if r < 0 {
		r = g.newRow(s)
	}
	row := g.trans[r/transPage][int(r%transPage)<<8:]
	t := row[b]
	if t >= 0 {
		return t
	}
	ds := g.states[s]
	if ds.next[b>>6]&(1<<(b&63)) == 0 {
		row[b] = 0
		return 0
	}
	var seeds []uint64
	for _, c := range ds.cfg {
		n := &g.nodes[int32(c>>32)]
		for _, e := range g.edges[n.e0:n.e1] {
			if e.lo <= b && b <= e.hi {
				seeds = append(seeds, pack(e.to, int32(uint32(c))))
			}
		}
	}
	t = g.closure(seeds)
	g.trans[r/transPage][int(r%transPage)<<8|int(b)] = t // closure may have grown g.trans
	return t
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

// ---- construction ----

type fragment struct{ in, out int32 }

type builder struct {
	g        *Grammar
	maxNodes int
	over     bool
	freeQ    map[int32][numBodyStates]int32 // freeBody normal node -> its substate nodes
	// edges and epsilon edges while building, in the order added, each
	// with the node it leaves; flatten sorts them into Grammar.edges and
	// Grammar.eps by node (a counting sort: sequential, unlike per-node
	// linked lists)
	edgeLinks []edgeLink
	epsLinks  []epsLink
	tails     map[string]*charTail // see addCharTail, by the chars it spells
	lastTail  *charTail            // the last one used, for lastPart
	lastPart  []chardfa.Range
}

// charTail is the multi-byte part of a char set (see tailPart) as rules,
// one per group of first bytes, and the call nodes returning to each target.
type charTail struct {
	groups []tailGroup
	calls  map[int32]int32 // target -> its first call node (one per group, consecutive)
}

// tailGroup is a set of first bytes of the char tail that lead into the
// same rule.
type tailGroup struct {
	ranges [][2]byte
	rule   int32
}

type edgeLink struct {
	e    edge
	from int32 // -1: removed
}

type epsLink struct{ to, from int32 }

// grow appends v to s, doubling a full slice: the default growth of large
// slices (1.25x) would copy a million-node automaton a dozen times.
func grow[T any](s []T, v T) []T {
	if len(s) == cap(s) {
		s = slices.Grow(s, max(len(s), 64))
	}
	return append(s, v)
}

func (b *builder) node() int32 {
	b.g.nodes = grow(b.g.nodes, node{call: -1, bodyState: -1, charsLeft: -1, loop: -1})
	if len(b.g.nodes) > b.maxNodes {
		b.over = true
	}
	return int32(len(b.g.nodes) - 1)
}

func (b *builder) eps(a, c int32) { b.epsLinks = grow(b.epsLinks, epsLink{c, a}) }

func (b *builder) edge(a int32, lo, hi byte, c int32) {
	b.edgeLinks = grow(b.edgeLinks, edgeLink{edge{lo, hi, c}, a})
}

// takeEdges removes node a's edges while building and returns them in the
// order added (a scan of every edge: for rare use).
func (b *builder) takeEdges(a int32) []edge {
	var es []edge
	for i := range b.edgeLinks {
		if l := &b.edgeLinks[i]; l.from == a {
			es = append(es, l.e)
			l.from = -1
		}
	}
	return es
}

// flatten moves every node's edges into the grammar's flat arrays.
func (b *builder) flatten() {
	g := b.g
	n := len(g.nodes)
	off := make([]int32, n+1)
	for _, l := range b.edgeLinks {
		if l.from >= 0 {
			off[l.from+1]++
		}
	}
	for i := 0; i < n; i++ {
		off[i+1] += off[i]
	}
	g.edges = make([]edge, off[n])
	for i := range g.nodes {
		g.nodes[i].e0, g.nodes[i].e1 = off[i], off[i]
	}
	for _, l := range b.edgeLinks {
		if l.from >= 0 {
			nd := &g.nodes[l.from]
			g.edges[nd.e1] = l.e
			nd.e1++
		}
	}
	clear(off)
	for _, l := range b.epsLinks {
		off[l.from+1]++
	}
	for i := 0; i < n; i++ {
		off[i+1] += off[i]
	}
	g.eps = make([]int32, off[n])
	for i := range g.nodes {
		g.nodes[i].p0, g.nodes[i].p1 = off[i], off[i]
	}
	for _, l := range b.epsLinks {
		nd := &g.nodes[l.from]
		g.eps[nd.p1] = l.to
		nd.p1++
	}
}

func (b *builder) empty() fragment {
	in, out := b.node(), b.node()
	b.eps(in, out)
	return fragment{in, out}
}

// never matches nothing.
func (b *builder) never() fragment { return fragment{b.node(), b.node()} }

func (b *builder) lit(s string) fragment {
	in := b.node()
	cur := in
	for i := 0; i < len(s); i++ {
		nx := b.node()
		b.edge(cur, s[i], s[i], nx)
		cur = nx
	}
	return fragment{in, cur}
}

func (b *builder) seq(fs ...fragment) fragment {
	if len(fs) == 0 {
		return b.empty()
	}
	for i := 0; i+1 < len(fs); i++ {
		b.eps(fs[i].out, fs[i+1].in)
	}
	return fragment{fs[0].in, fs[len(fs)-1].out}
}

func (b *builder) alt(fs ...fragment) fragment {
	if len(fs) == 1 {
		return fs[0]
	}
	in, out := b.node(), b.node()
	for _, f := range fs {
		b.eps(in, f.in)
		b.eps(f.out, out)
	}
	return fragment{in, out}
}

func (b *builder) opt(f fragment) fragment {
	in, out := b.node(), b.node()
	b.eps(in, f.in)
	b.eps(in, out)
	b.eps(f.out, out)
	return fragment{in, out}
}

func (b *builder) star(f fragment) fragment {
	in, out := b.node(), b.node()
	b.eps(in, f.in)
	b.eps(in, out)
	b.eps(f.out, f.in)
	b.eps(f.out, out)
	return fragment{in, out}
}

func (b *builder) call(rule int32) fragment {
	in, out := b.node(), b.node()
	b.g.nodes[in].call = rule
	b.g.nodes[in].ret = out
	return fragment{in, out}
}

// freeString emits a JSON string (quotes included) with any content, using
// the reference body automaton so the per-Compiler string tables apply.
func (b *builder) freeString() fragment {
	in, out := b.node(), b.node()
	b.edge(in, '"', '"', b.freeBody(out))
	return fragment{in, out}
}

// charString emits a JSON string whose decoded value is accepted by d.
// States that accept and loop on every char become a tagged free-string
// body, so their masks come from the per-Compiler string tables.
func (b *builder) charString(d *chardfa.DFA) fragment {
	in, out := b.node(), b.node()
	ns := make([]int32, len(d.Trans))
	free := make([]bool, len(d.Trans))
	memo2 := map[runKey]int32{}
	pr := plainRuns(d)
	tot := totalStates(d)
	for i := range ns {
		if d.Accept[i] && coversAllTo(d.Trans[i], int32(i)) {
			f := b.freeBody(out)
			ns[i], free[i] = f, true
			continue
		}
		ns[i] = b.node()
		b.g.nodes[ns[i]].total = tot[i]
		if cl := loopClass(d.Trans[i], int32(i)); popcount2(cl) >= 8 {
			b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(cl), unboundedRem
		} else if pr[i] >= 2 {
			b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(plainASCII), pr[i]
		} else if cl := runClass(d.Trans[i]); popcount2(cl) >= 8 {
			if r := runLen(d, int32(i), cl, map[int32]bool{}, memo2); r > 0 {
				b.g.nodes[ns[i]].loop, b.g.nodes[ns[i]].run = b.classID(cl), r
			}
		}
		if d.Counted {
			rem := int32(unboundedRem)
			if d.MaxLen >= 0 {
				rem = int32(d.MaxLen - i)
			}
			b.g.nodes[ns[i]].charsLeft = rem
		}
	}
	b.edge(in, '"', '"', ns[0])
	memo := map[string]int32{}
	pend := map[int32]uint64{}
	for i, tr := range d.Trans {
		if free[i] {
			continue
		}
		if d.Accept[i] {
			b.edge(ns[i], '"', '"', out)
		}
		to := nonASCIITo(tr)
		if len(d.Trans) >= tailStates && !(to >= 0 && free[to]) {
			// Literal chars get edges here; the chars written with more
			// than one byte call the grammar's shared rules for them, per
			// target (a few nodes per state instead of dozens).
			for _, t := range tr {
				b.plainEdges(ns[i], t.Lo, t.Hi, ns[t.To])
			}
			for _, tp := range tailParts(tr) {
				b.addCharTail(ns[i], tp.chars, ns[tp.to])
			}
			continue
		}
		for _, t := range tr {
			if to >= 0 && free[to] && t.To == to && t.Hi >= 0x80 {
				if t.Lo < 0x80 {
					b.charRange(ns[i], t.Lo, 0x7F, ns[t.To], memo, pend)
				}
				continue
			}
			b.charRange(ns[i], t.Lo, t.Hi, ns[t.To], memo, pend)
		}
		for _, t := range tr { // in transition order, so node numbering is stable
			if esc, ok := pend[ns[t.To]]; ok {
				b.edge(ns[i], '\\', '\\', b.escNode(ns[t.To], esc, memo))
				delete(pend, ns[t.To])
			}
		}
		if to >= 0 && free[to] {
			// Every non-ASCII char leads into a free body: enter it at the
			// substate after the lead byte, so states inside the char are
			// tagged and masks take the string-table path.
			q := b.freeQ[ns[to]]
			for c := 0xC2; c <= 0xF4; {
				// one edge per run of lead bytes entering the same substate
				sq, e := bodyStep(bodyNormal, byte(c)), c
				for e < 0xF4 && bodyStep(bodyNormal, byte(e+1)) == sq {
					e++
				}
				b.edge(ns[i], byte(c), byte(e), q[sq])
				c = e + 1
			}
		}
	}
	return fragment{in, out}
}

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
	for i, tr := range d.Trans {
		in[i] = coversAll(tr)
	}
	// a state stops being total once any successor is not: propagate
	// backwards from the states that are not (linear; a fixpoint sweep
	// would take one pass per char of a long counted string)
	preds := make([][]int32, n)
	var work []int32
	for i, tr := range d.Trans {
		for _, t := range tr {
			preds[t.To] = append(preds[t.To], int32(i))
		}
		if !in[i] {
			work = append(work, int32(i))
		}
	}
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

// freeBody builds the reference string-body automaton closing into out and
// returns its normal-substate node.
func (b *builder) freeBody(out int32) int32 {
	var q [numBodyStates]int32
	for i := range q {
		q[i] = b.node()
		b.g.nodes[q[i]].bodyState = int8(i)
	}
	if b.freeQ == nil {
		b.freeQ = map[int32][numBodyStates]int32{}
	}
	b.freeQ[q[bodyNormal]] = q
	for _, e := range freeBodyEdges {
		to := out
		if e.to != bodyClosed {
			to = q[e.to]
		}
		b.edge(q[e.from], e.lo, e.hi, to)
	}
	return q[bodyNormal]
}

type bodyEdge struct {
	from, to int
	lo, hi   byte
}

// freeBodyEdges are the byte-range edges of the string body automaton
// (bodyStep), computed once: every free string of every grammar has them.
var freeBodyEdges = func() []bodyEdge {
	var es []bodyEdge
	for i := 0; i < numBodyStates; i++ {
		lastT, start := -100, 0
		flush := func(end int) {
			if lastT == -100 || lastT == bodyDead {
				return
			}
			es = append(es, bodyEdge{from: i, to: lastT, lo: byte(start), hi: byte(end)})
		}
		for c := 0; c < 256; c++ {
			t := bodyStep(i, byte(c))
			if t != lastT {
				flush(c - 1)
				lastT, start = t, c
			}
		}
		flush(255)
	}
	return es
}()

// suffix returns a node from which the byte-range sequence seq leads to c;
// nodes are shared per (c, seq) so wide char ranges stay small.
func (b *builder) suffix(c int32, seq [][2]byte, memo map[string]int32) int32 {
	if len(seq) == 0 {
		return c
	}
	key := make([]byte, 0, 4+2*len(seq))
	key = append(key, byte(c), byte(c>>8), byte(c>>16), byte(c>>24))
	for _, r := range seq {
		key = append(key, r[0], r[1])
	}
	if n, ok := memo[string(key)]; ok {
		return n
	}
	n := b.node()
	b.edge(n, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
	memo[string(key)] = n
	return n
}

// charRange adds paths from a to c spelling each char of [lo,hi] in a JSON
// string: literally where allowed, and with its escape forms. The escape
// forms go through escNode, one node per target and set of escaped chars;
// with pend set they are collected there instead (per target), so that a
// state whose several ranges lead to c gets one '\\' edge, not one per
// escape form and range.
func (b *builder) charRange(a int32, lo, hi rune, c int32, memo map[string]int32, pend map[int32]uint64) {
	var esc uint64 // bit r: control char r; escBitQuote etc.
	if lo <= 0x1F {
		for r := lo; r <= min(hi, 0x1F); r++ {
			esc |= 1 << uint(r)
		}
	}
	lit := func(l, h rune) {
		chardfa.UTF8Ranges(l, h, func(seq [][2]byte) {
			b.edge(a, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
		})
	}
	l := max(lo, 0x20)
	for _, sp := range []rune{'"', '/', '\\'} {
		if l <= sp && sp <= hi {
			lit(l, sp-1)
			switch sp {
			case '"':
				esc |= escBitQuote
			case '\\':
				esc |= escBitBackslash
			case '/':
				esc |= escBitSlash
				lit('/', '/')
			}
			l = sp + 1
		}
	}
	lit(l, hi)
	switch {
	case esc == 0:
	case pend != nil:
		pend[c] |= esc
	default:
		b.edge(a, '\\', '\\', b.escNode(c, esc, memo))
	}
}

// shortEscapes are the one-letter escapes, by escNode bit.
var shortEscapes = []struct {
	bit uint
	ch  byte
}{{'\b', 'b'}, {'\t', 't'}, {'\n', 'n'}, {'\f', 'f'}, {'\r', 'r'}, {32, '"'}, {33, '\\'}, {34, '/'}}

const (
	escBitQuote     = 1 << 32
	escBitBackslash = 1 << 33
	escBitSlash     = 1 << 34
)

// escNode returns the node after a '\\' from which the escape forms of the
// chars in esc lead to c: the short escapes (\n \r \t \b \f \" \\ \/) and
// \u00XX for control chars, hex digits in either case. Nodes are shared per
// (c, esc).
func (b *builder) escNode(c int32, esc uint64, memo map[string]int32) int32 {
	key := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32([]byte{'e'}, uint32(c)), esc)
	if n, ok := memo[string(key)]; ok {
		return n
	}
	e := b.node()
	memo[string(key)] = e
	for _, sh := range shortEscapes {
		if esc&(1<<sh.bit) != 0 {
			b.edge(e, sh.ch, sh.ch, c)
		}
	}
	ctl := esc & (1<<32 - 1)
	if ctl == 0 {
		return e
	}
	u0 := b.node()
	b.edge(e, 'u', 'u', b.suffix(u0, [][2]byte{{'0', '0'}, {'0', '0'}}, memo))
	for hi := 0; hi < 2; hi++ {
		half := ctl >> (16 * hi) & 0xFFFF
		if half == 0 {
			continue
		}
		h := b.node()
		b.edge(u0, '0'+byte(hi), '0'+byte(hi), h)
		// last hex digit: runs of set bits as byte ranges, both cases for a-f
		for d := 0; d < 16; {
			if half&(1<<d) == 0 {
				d++
				continue
			}
			e := d
			for e < 15 && half&(1<<(e+1)) != 0 && e+1 != 10 {
				e++
			}
			if d < 10 {
				b.edge(h, '0'+byte(d), '0'+byte(e), c)
			} else {
				b.edge(h, 'a'+byte(d-10), 'a'+byte(e-10), c)
				b.edge(h, 'A'+byte(d-10), 'A'+byte(e-10), c)
			}
			d = e + 1
		}
	}
	return e
}

// tailStates is the char-DFA size from which charString spells escapes and
// non-ASCII chars through shared rules (addCharTail): maxLength 4096 would
// otherwise be ~40 nodes per char. Smaller automata keep inline paths,
// whose masks are a little cheaper to compute (no call frames to step).
const tailStates = 512

// tailChars are the chars a JSON string writes with more than one byte:
// control chars, '"', '\\' and '/' (escaped; '/' may also be literal) and
// every non-ASCII char.
var tailChars = []chardfa.Range{{Lo: 0, Hi: 0x1F}, {Lo: '"', Hi: '"'}, {Lo: '/', Hi: '/'}, {Lo: '\\', Hi: '\\'}, {Lo: 0x80, Hi: chardfa.MaxRune}}

// tailPart is the part of a state's transitions on tailChars that leads
// to one state.
type tailPart struct {
	chars []chardfa.Range
	to    int32
}

// tailParts splits the transitions of tr on tailChars, clipped to them, by
// the state they lead to, in order of first appearance.
func tailParts(tr []chardfa.Edge) []tailPart {
	var parts []tailPart
	for _, t := range tr {
		for _, c := range tailChars {
			lo, hi := max(t.Lo, c.Lo), min(t.Hi, c.Hi)
			if lo > hi {
				continue
			}
			k := slices.IndexFunc(parts, func(p tailPart) bool { return p.to == t.To })
			if k < 0 {
				k = len(parts)
				parts = append(parts, tailPart{to: t.To})
			}
			parts[k].chars = append(parts[k].chars, chardfa.Range{Lo: lo, Hi: hi})
		}
	}
	return parts
}

// plainEdges adds the edges from a to c for the chars of [lo,hi] that a
// JSON string holds as one literal byte.
func (b *builder) plainEdges(a int32, lo, hi rune, c int32) {
	lo, hi = max(lo, 0x20), min(hi, 0x7F)
	for _, sp := range []rune{'"', '\\'} {
		if lo <= sp && sp <= hi {
			if lo < sp {
				b.edge(a, byte(lo), byte(sp-1), c)
			}
			lo = sp + 1
		}
	}
	if lo <= hi {
		b.edge(a, byte(lo), byte(hi), c)
	}
}

// addCharTail adds the paths from a to c spelling the chars of part (a
// subset of tailChars) in a JSON string: escapes and non-ASCII chars. They
// are built once per grammar and char set as rules, one per group of first
// bytes, and each target gets one call node per group, so a char state
// costs a handful of nodes and keeps a single configuration.
func (b *builder) addCharTail(a int32, part []chardfa.Range, c int32) {
	ct := b.lastTail
	if ct == nil || !slices.Equal(part, b.lastPart) {
		// consecutive states of a long string mostly share their char set
		kb := make([]byte, 0, 8*len(part))
		for _, r := range part {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(r.Lo))
			kb = binary.LittleEndian.AppendUint32(kb, uint32(r.Hi))
		}
		if b.tails == nil {
			b.tails = map[string]*charTail{}
		}
		if ct = b.tails[string(kb)]; ct == nil {
			ct = b.buildTail(part)
			b.tails[string(kb)] = ct
		}
		b.lastTail, b.lastPart = ct, slices.Clone(part)
	}
	q0, ok := ct.calls[c]
	if !ok {
		// one call node per group, consecutive from q0
		q0 = int32(len(b.g.nodes))
		for _, tg := range ct.groups {
			q := b.node()
			b.g.nodes[q].call, b.g.nodes[q].ret = tg.rule, c
		}
		ct.calls[c] = q0
	}
	for k, tg := range ct.groups {
		for _, r := range tg.ranges {
			b.edge(a, r[0], r[1], q0+int32(k))
		}
	}
}

func (b *builder) buildTail(part []chardfa.Range) *charTail {
	first, end := b.node(), b.node()
	b.g.nodes[end].final = true
	memo := map[string]int32{}
	for _, r := range part {
		b.charRange(first, r.Lo, r.Hi, end, memo, nil)
	}
	// group first bytes by the set of nodes they lead to (a literal '/'
	// leads to end: plainEdges writes it)
	var after [256][]int32
	for _, e := range b.takeEdges(first) {
		if e.to == end {
			continue
		}
		for x := int(e.lo); x <= int(e.hi); x++ {
			after[x] = append(after[x], e.to)
		}
	}
	ct := &charTail{calls: map[int32]int32{}}
	groups := map[string]int{}
	for x := 0; x < 256; x++ {
		if len(after[x]) == 0 {
			continue
		}
		slices.Sort(after[x])
		after[x] = slices.Compact(after[x])
		var kb []byte
		for _, n := range after[x] {
			kb = binary.LittleEndian.AppendUint32(kb, uint32(n))
		}
		k, ok := groups[string(kb)]
		if !ok {
			start := after[x][0]
			if len(after[x]) > 1 {
				start = b.node()
				for _, n := range after[x] {
					b.eps(start, n)
				}
			}
			k = len(ct.groups)
			groups[string(kb)] = k
			ct.groups = append(ct.groups, tailGroup{rule: int32(len(b.g.rules))})
			b.g.rules = append(b.g.rules, start)
		}
		tg := &ct.groups[k]
		if n := len(tg.ranges); n > 0 && int(tg.ranges[n-1][1]) == x-1 {
			tg.ranges[n-1][1] = byte(x)
		} else {
			tg.ranges = append(tg.ranges, [2]byte{byte(x), byte(x)})
		}
	}
	return ct
}
