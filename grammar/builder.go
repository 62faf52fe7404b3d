package grammar

import (
	"context"
	"fmt"
	"slices"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// fragment is a piece of automaton under construction: entered at node in, left at node out.
type fragment struct{ in, out int32 }

// builder grows one Grammar's nodes and edges during a compile.
type builder struct {
	g        *Grammar // the grammar being built
	maxNodes int      // node budget (Limits.MaxStates)
	over     bool     // the budget was exceeded, or ctx ended: building stops
	// ctx ends an abandoned compile: node() polls it, and once it has ended (or the budget
	// is spent) nothing more is allocated, so a compile given up stops growing at once
	ctx     context.Context
	stopped error                          // ctx's error once seen
	freeQ   map[int32][numBodyStates]int32 // freeBody normal node -> its substate nodes
	// rule is the rule being built; reasons[r] say why rule r may accept
	// nothing, and emptyWhat names the grammar, for emptyError
	rule      int32
	reasons   map[int32][]string
	emptyWhat string
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

// ctxPoll is how many nodes are made between two looks at the builder's context.
const ctxPoll = 4096

// node adds a node. Over budget (or cancelled) it adds nothing and returns the last node,
// which the failed compile never reads: the builder's memory stops growing where the budget
// says, however much more the caller goes on building before it looks at b.over.
func (b *builder) node() int32 {
	if b.over {
		return int32(len(b.g.nodes) - 1)
	}
	b.g.nodes = grow(b.g.nodes, node{call: -1, bodyState: -1, charsLeft: -1, loop: -1})
	n := len(b.g.nodes)
	if n > b.maxNodes {
		b.over = true
	}
	if n%ctxPoll == 0 && b.ctx != nil {
		if err := b.ctx.Err(); err != nil {
			b.over, b.stopped = true, context.Cause(b.ctx)
		}
	}
	return int32(n - 1)
}

func (b *builder) eps(a, c int32) {
	if !b.over {
		b.epsLinks = grow(b.epsLinks, epsLink{c, a})
	}
}

func (b *builder) edge(a int32, lo, hi byte, c int32) {
	if !b.over {
		b.edgeLinks = grow(b.edgeLinks, edgeLink{edge{lo, hi, c}, a})
	}
}

// overErr is the error of a build that stopped: its context's, or the node budget's.
func (b *builder) overErr(what string) error {
	if b.stopped != nil {
		return fmt.Errorf("grammar compile stopped: %w", b.stopped)
	}
	return errf("%s compiles to more than %d automaton nodes", what, b.maxNodes)
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

// callBetween adds a call of rule from node from, returning to node to.
func (b *builder) callBetween(from, rule, to int32) {
	f := b.call(rule)
	b.eps(from, f.in)
	b.eps(f.out, to)
}

type builderScratch struct {
	nodes     []node
	edgeLinks []edgeLink
	epsLinks  []epsLink
}

// scratchKeep bounds the node buffer kept between compiles (~12 MB of
// nodes, and their edge links).
const scratchKeep = 1 << 18

func (c *Compiler) newBuilder(ctx context.Context) *builder {
	b := &builder{g: &Grammar{vt: c.vt}, maxNodes: c.opts.Limits.MaxStates, ctx: ctx}
	c.scratchMu.Lock()
	if sc := c.scratch; sc != nil {
		c.scratch = nil
		b.g.nodes, b.edgeLinks, b.epsLinks = sc.nodes[:0], sc.edgeLinks[:0], sc.epsLinks[:0]
	}
	c.scratchMu.Unlock()
	return b
}

// release hands b's buffers back for the next compile; b is done with.
func (c *Compiler) release(b *builder, nodes []node) {
	if cap(b.edgeLinks) > 4*scratchKeep || cap(b.epsLinks) > 4*scratchKeep {
		return
	}
	c.scratchMu.Lock()
	c.scratch = &builderScratch{nodes: nodes, edgeLinks: b.edgeLinks, epsLinks: b.epsLinks}
	c.scratchMu.Unlock()
}
