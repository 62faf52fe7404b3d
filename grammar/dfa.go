package grammar

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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

	size atomic.Int64 // bytes held, growing with the DFA (see Bytes)

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

	// the bounds of the mask computation under way (see tick), guarded by mu: the work done, the
	// work allowed (0: no bound) and the deadline (zero: none)
	ops, opsMax int64
	stopAt      time.Time
	// exhausted: a closure was refused for want of DFA states (maxStates): from then on
	// transitions the masks counted on may be dead
	exhausted bool

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
		g.tick()
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
			if len(out) > maxConfigs {
				// an ambiguous grammar's configurations can double at each level of nesting:
				// refuse, and say so, as when the DFA runs out of states
				g.work, g.out = work[:0], out[:0]
				return g.overgrown()
			}
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
		return g.overgrown()
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

// maxConfigs bounds the configurations of one DFA state (a variable for tests).
var maxConfigs = 1 << 16

// overgrown refuses a closure over budget (DFA states, or configurations in one state): it is
// dead, rather than accepting too much, and the grammar says so from then on (a mask cached
// before may allow what is now refused: FillMaskWithin reports ErrDFAExhausted, failing the
// request). A bounded mask computation stops here: it cannot be trusted. g.mu is held.
func (g *Grammar) overgrown() int32 {
	g.exhausted = true
	if g.opsMax > 0 || !g.stopAt.IsZero() {
		panic(maskAbort{ErrDFAExhausted})
	}
	return 0
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
