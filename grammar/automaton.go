package grammar

import (
	"encoding/binary"
	"slices"
	"sync"
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

type node struct {
	edges []edge
	eps   []int32
	call  int32 // rule called from here (-1 none); continues at ret
	ret   int32
	final bool // end of its rule
	strq  int8 // free-string body substate, or -1
}

type stackEnt struct {
	ret, parent, depth int32
}

type dstate struct {
	cfg    []uint64
	accept bool
	popped bool // a hole frame (see holeStack) ended: what follows depends on the caller
	strq   int8
	next   [4]uint64 // bytes with an outgoing edge
	mask   *cmask
	local  *localMask // for hole-rooted states: the context-independent part of the mask
}

// localMask is the mask of a hole-rooted state: tokens accepted without
// leaving the frame (valid under any caller), and the trie subtrees whose
// tokens may leave it, which are walked again from each real state.
type localMask struct {
	acc []int32
	unc []uncRoot
}

type uncRoot struct {
	node   int32  // trie node whose subtree is context-dependent
	prefix []byte // bytes of its ancestors
}

// cmask is a cached token mask: base (shared, may be nil) plus add tokens,
// or a dense bitset.
type cmask struct {
	base  []uint64
	add   []int32
	dense []uint64
}

func (c *cmask) fill(dst []uint64) {
	switch {
	case c.dense != nil:
		copy(dst, c.dense)
	case c.base != nil:
		copy(dst, c.base)
	default:
		clear(dst)
	}
	for _, t := range c.add {
		dst[t>>6] |= 1 << (uint(t) & 63)
	}
}

const maxStackDepth = 200

// Grammar is a compiled grammar; it is safe for concurrent use by many
// matchers. Its language is fixed at compile time; the lazily built DFA and
// mask caches behind it are guarded by mu.
type Grammar struct {
	vt    *vocabTables
	nodes []node
	rules []int32 // rule start nodes; rule 0 is the root

	mu        sync.Mutex
	stacks    []stackEnt
	stackIdx  map[[2]int32]int32
	holes     map[int32]int32 // stack depth -> hole stack of that depth
	states    []*dstate
	stateIdx  map[string]int32
	trans     []int32 // state*256+byte -> state, -1 unknown, 0 dead
	maxStates int
	start     int32

	// scratch, guarded by mu
	work  []uint64
	out   []uint64
	seen  map[uint64]struct{}
	key   []byte
	walkS []int32
	toks  []int32
}

func pack(n, s int32) uint64 { return uint64(uint32(n))<<32 | uint64(uint32(s)) }

func (g *Grammar) initDFA(maxStates int) {
	g.stacks = []stackEnt{{ret: -1, parent: -1}}
	g.stackIdx = map[[2]int32]int32{}
	g.holes = map[int32]int32{}
	g.stateIdx = map[string]int32{}
	g.seen = map[uint64]struct{}{}
	g.maxStates = maxStates
	dead := &dstate{strq: -1, mask: &cmask{}}
	g.states = []*dstate{dead}
	g.trans = make([]int32, 256)
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
	clear(g.seen)
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
		if len(n.edges) > 0 {
			out = append(out, c)
		}
		for _, e := range n.eps {
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
	ds := &dstate{cfg: slices.Clone(out), accept: accept, popped: popped, strq: -2}
	for _, c := range out {
		n := &g.nodes[int32(c>>32)]
		for _, e := range n.edges {
			for b := int(e.lo); b <= int(e.hi); b++ {
				ds.next[b>>6] |= 1 << (uint(b) & 63)
			}
		}
		if ds.strq == -2 {
			ds.strq = n.strq
		} else if ds.strq != n.strq {
			ds.strq = -1
		}
	}
	if ds.strq == -2 {
		ds.strq = -1
	}
	i := int32(len(g.states))
	g.states = append(g.states, ds)
	g.stateIdx[string(key)] = i
	for k := 0; k < 256; k++ {
		g.trans = append(g.trans, -1)
	}
	return i
}

// step is the DFA transition on byte b.
func (g *Grammar) step(s int32, b byte) int32 {
	t := g.trans[int(s)<<8|int(b)]
	if t >= 0 {
		return t
	}
	ds := g.states[s]
	if ds.next[b>>6]&(1<<(b&63)) == 0 {
		g.trans[int(s)<<8|int(b)] = 0
		return 0
	}
	var seeds []uint64
	for _, c := range ds.cfg {
		n := &g.nodes[int32(c>>32)]
		for _, e := range n.edges {
			if e.lo <= b && b <= e.hi {
				seeds = append(seeds, pack(e.to, int32(uint32(c))))
			}
		}
	}
	t = g.closure(seeds)
	g.trans[int(s)<<8|int(b)] = t
	return t
}

// walk adds to g.toks every token of tr accepted from state s.
func (g *Grammar) walk(tr *trie, s int32) {
	if cap(g.walkS) < tr.maxD+1 {
		g.walkS = make([]int32, tr.maxD+1)
	}
	st := g.walkS[:tr.maxD+1]
	st[0] = s
	n := int32(len(tr.b))
	for i := int32(0); i < n; {
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

// walkSub adds to g.toks every token in the subtree of trie node root
// accepted from state s, where s is the state after root's ancestors.
func (g *Grammar) walkSub(tr *trie, root int32, s int32) {
	if cap(g.walkS) < tr.maxD+1 {
		g.walkS = make([]int32, tr.maxD+1)
	}
	st := g.walkS[:tr.maxD+1]
	st[tr.d[root]] = s
	for i, n := root, tr.end[root]; i < n; {
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
	tr := g.vt.trie
	lm := &localMask{}
	st := make([]int32, tr.maxD+1)
	path := make([]byte, tr.maxD+1)
	st[0] = l
	for i, n := int32(0), int32(len(tr.b)); i < n; {
		d := tr.d[i]
		t := g.step(st[d], tr.b[i])
		if t == 0 {
			i = tr.end[i]
			continue
		}
		if g.states[t].popped {
			lm.unc = append(lm.unc, uncRoot{node: i, prefix: slices.Clone(path[:d])})
			i = tr.end[i]
			continue
		}
		if id := tr.tok[i]; id >= 0 {
			lm.acc = append(lm.acc, id)
			if ds, ok := tr.dups[i]; ok {
				lm.acc = append(lm.acc, ds...)
			}
		}
		st[d+1] = t
		path[d] = tr.b[i]
		i++
	}
	ls.local = lm
	return lm
}

const sparseMax = 2048

func (g *Grammar) maskOf(s int32) *cmask {
	ds := g.states[s]
	if ds.mask != nil {
		return ds.mask
	}
	g.toks = g.toks[:0]
	m := &cmask{}
	if ds.strq >= 0 {
		st := &g.vt.str[ds.strq]
		g.walk(st.close, s)
		m.base = st.in
	} else if l := g.localOf(s); l >= 0 {
		lm := g.localMaskOf(l)
		g.toks = append(g.toks, lm.acc...)
		for _, u := range lm.unc {
			rs := s
			for _, c := range u.prefix {
				if rs = g.step(rs, c); rs == 0 {
					break
				}
			}
			if rs != 0 {
				g.walkSub(g.vt.trie, u.node, rs)
			}
		}
	} else {
		g.walk(g.vt.trie, s)
	}
	if len(g.toks) > sparseMax && m.base == nil {
		m.dense = make([]uint64, g.vt.words)
		for _, t := range g.toks {
			m.dense[t>>6] |= 1 << (uint(t) & 63)
		}
	} else {
		m.add = slices.Clone(g.toks)
	}
	ds.mask = m
	return m
}

// ---- construction ----

type frag struct{ in, out int32 }

type builder struct {
	g        *Grammar
	maxNodes int
	over     bool
}

func (b *builder) node() int32 {
	b.g.nodes = append(b.g.nodes, node{call: -1, strq: -1})
	if len(b.g.nodes) > b.maxNodes {
		b.over = true
	}
	return int32(len(b.g.nodes) - 1)
}

func (b *builder) eps(a, c int32) { b.g.nodes[a].eps = append(b.g.nodes[a].eps, c) }

func (b *builder) edge(a int32, lo, hi byte, c int32) {
	b.g.nodes[a].edges = append(b.g.nodes[a].edges, edge{lo, hi, c})
}

func (b *builder) empty() frag {
	in, out := b.node(), b.node()
	b.eps(in, out)
	return frag{in, out}
}

// never matches nothing.
func (b *builder) never() frag { return frag{b.node(), b.node()} }

func (b *builder) lit(s string) frag {
	in := b.node()
	cur := in
	for i := 0; i < len(s); i++ {
		nx := b.node()
		b.edge(cur, s[i], s[i], nx)
		cur = nx
	}
	return frag{in, cur}
}

func (b *builder) seq(fs ...frag) frag {
	if len(fs) == 0 {
		return b.empty()
	}
	for i := 0; i+1 < len(fs); i++ {
		b.eps(fs[i].out, fs[i+1].in)
	}
	return frag{fs[0].in, fs[len(fs)-1].out}
}

func (b *builder) alt(fs ...frag) frag {
	if len(fs) == 1 {
		return fs[0]
	}
	in, out := b.node(), b.node()
	for _, f := range fs {
		b.eps(in, f.in)
		b.eps(f.out, out)
	}
	return frag{in, out}
}

func (b *builder) opt(f frag) frag {
	in, out := b.node(), b.node()
	b.eps(in, f.in)
	b.eps(in, out)
	b.eps(f.out, out)
	return frag{in, out}
}

func (b *builder) star(f frag) frag {
	in, out := b.node(), b.node()
	b.eps(in, f.in)
	b.eps(in, out)
	b.eps(f.out, f.in)
	b.eps(f.out, out)
	return frag{in, out}
}

func (b *builder) call(rule int32) frag {
	in, out := b.node(), b.node()
	b.g.nodes[in].call = rule
	b.g.nodes[in].ret = out
	return frag{in, out}
}

// freeString emits a JSON string (quotes included) with any content, using
// the reference body automaton so the per-Compiler string tables apply.
func (b *builder) freeString() frag {
	in, out := b.node(), b.node()
	b.edge(in, '"', '"', b.freeBody(out))
	return frag{in, out}
}

// charString emits a JSON string whose decoded value is accepted by d.
// States that accept and loop on every char become a tagged free-string
// body, so their masks come from the per-Compiler string tables.
func (b *builder) charString(d *cdfa) frag {
	in, out := b.node(), b.node()
	ns := make([]int32, len(d.trans))
	free := make([]bool, len(d.trans))
	for i := range ns {
		if d.acc[i] && coversAllTo(d.trans[i], int32(i)) {
			f := b.freeBody(out)
			ns[i], free[i] = f, true
			continue
		}
		ns[i] = b.node()
	}
	b.edge(in, '"', '"', ns[0])
	memo := map[string]int32{}
	for i, tr := range d.trans {
		if free[i] {
			continue
		}
		if d.acc[i] {
			b.edge(ns[i], '"', '"', out)
		}
		for _, t := range tr {
			b.charRange(ns[i], t.lo, t.hi, ns[t.to], memo)
		}
	}
	return frag{in, out}
}

func coversAllTo(tr []ctr, to int32) bool {
	k := 0
	for _, r := range anyChar {
		lo := r.lo
		for k < len(tr) && tr[k].to == to && tr[k].lo == lo && lo <= r.hi {
			lo = tr[k].hi + 1
			k++
		}
		if lo <= r.hi {
			return false
		}
	}
	return k == len(tr)
}

// freeBody builds the reference string-body automaton closing into out and
// returns its normal-substate node.
func (b *builder) freeBody(out int32) int32 {
	var q [numSQ]int32
	for i := range q {
		q[i] = b.node()
		b.g.nodes[q[i]].strq = int8(i)
	}
	for i := 0; i < numSQ; i++ {
		lastT, start := -100, 0
		flush := func(end int) {
			if lastT == -100 || lastT == sqDead {
				return
			}
			to := out
			if lastT != sqClose {
				to = q[lastT]
			}
			b.edge(q[i], byte(start), byte(end), to)
		}
		for c := 0; c < 256; c++ {
			t := strStep(i, byte(c))
			if t != lastT {
				flush(c - 1)
				lastT, start = t, c
			}
		}
		flush(255)
	}
	return q[sqNormal]
}

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
// string: literally where allowed, and with its escape forms.
func (b *builder) charRange(a int32, lo, hi rune, c int32, memo map[string]int32) {
	path := func(bs string) {
		seq := make([][2]byte, len(bs))
		for i := 0; i < len(bs); i++ {
			seq[i] = [2]byte{bs[i], bs[i]}
		}
		b.edge(a, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
	}
	if lo == 0 && hi >= 0x1F {
		// all control chars: short escapes and \u00XX (four hex digits) with any hex case
		for _, e := range []string{`\n`, `\r`, `\t`, `\b`, `\f`} {
			path(e)
		}
		b.edge(a, '\\', '\\', b.suffix(c, [][2]byte{{'u', 'u'}, {'0', '0'}, {'0', '0'}, {'0', '1'}, {'0', '9'}}, memo))
		b.edge(a, '\\', '\\', b.suffix(c, [][2]byte{{'u', 'u'}, {'0', '0'}, {'0', '0'}, {'0', '1'}, {'a', 'f'}}, memo))
		b.edge(a, '\\', '\\', b.suffix(c, [][2]byte{{'u', 'u'}, {'0', '0'}, {'0', '0'}, {'0', '1'}, {'A', 'F'}}, memo))
	} else {
		for r := lo; r <= hi && r < 0x20; r++ {
			switch r {
			case '\n':
				path(`\n`)
			case '\r':
				path(`\r`)
			case '\t':
				path(`\t`)
			case '\b':
				path(`\b`)
			case '\f':
				path(`\f`)
			}
			path(`\u00` + string(hexDigits[r>>4]) + string(hexDigits[r&15]))
			if r&15 >= 10 {
				up := "0123456789ABCDEF"
				path(`\u00` + string(up[r>>4]) + string(up[r&15]))
			}
		}
	}
	lit := func(l, h rune) {
		utf8Seqs(l, h, func(seq [][2]byte) {
			b.edge(a, seq[0][0], seq[0][1], b.suffix(c, seq[1:], memo))
		})
	}
	l := max(lo, 0x20)
	for _, sp := range []rune{'"', '/', '\\'} {
		if l <= sp && sp <= hi {
			lit(l, sp-1)
			switch sp {
			case '"':
				path(`\"`)
			case '\\':
				path(`\\`)
			case '/':
				path(`\/`)
				lit('/', '/')
			}
			l = sp + 1
		}
	}
	lit(l, hi)
}
