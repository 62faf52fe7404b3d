package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// A grammar that accepts no document would fail every request at run time
// (no token allowed at some step), so the compile refuses it instead.
// productive computes which nodes can reach the end of their rule: a node
// is productive when an edge or epsilon edge leads to a productive node, or
// it calls a rule whose start is productive and returns to a productive
// node, or it ends its rule. The grammar accepts a document iff the root
// rule's start is productive. (Call depth is not bounded here; the DFA cuts
// stacks at maxStackDepth, which no schema's shortest document nears.)

// productive returns, per node of the flattened grammar g, whether it can
// reach the end of its rule.
func (g *Grammar) productive() []bool {
	n := int32(len(g.nodes))
	prod := make([]bool, n)
	// reverse adjacency: preds[off[t]:off[t+1]] are the nodes with an edge
	// or epsilon edge to t, or returning to t after a call (negated - 1)
	off := make([]int32, n+1)
	for i := range g.nodes {
		nd := &g.nodes[i]
		for _, e := range g.edges[nd.e0:nd.e1] {
			off[e.to+1]++
		}
		for _, t := range g.eps[nd.p0:nd.p1] {
			off[t+1]++
		}
		if nd.call >= 0 {
			off[nd.ret+1]++
		}
	}
	for i := int32(0); i < n; i++ {
		off[i+1] += off[i]
	}
	preds := make([]int32, off[n])
	fill := slices.Clone(off[:n])
	add := func(t, p int32) {
		preds[fill[t]] = p
		fill[t]++
	}
	// callers of each rule, and the rules starting at each node, as
	// linked lists threaded through slices (maps cost a third of this
	// function on large grammars)
	firstCaller := make([]int32, len(g.rules)) // rule -> a call node, or -1
	nextCaller := make([]int32, n)             // call node -> another call node of its rule, or -1
	firstStart := make([]int32, n)             // node -> a rule starting there, or -1
	nextStart := make([]int32, len(g.rules))   // rule -> another rule starting at its node, or -1
	for i := range firstCaller {
		firstCaller[i] = -1
	}
	for i := range firstStart {
		firstStart[i] = -1
	}
	for r, s := range g.rules {
		nextStart[r] = -1
		if s >= 0 {
			nextStart[r], firstStart[s] = firstStart[s], int32(r)
		}
	}
	for i := int32(0); i < n; i++ {
		nd := &g.nodes[i]
		for _, e := range g.edges[nd.e0:nd.e1] {
			add(e.to, i)
		}
		for _, t := range g.eps[nd.p0:nd.p1] {
			add(t, i)
		}
		if nd.call >= 0 {
			add(nd.ret, -i-1)
			nextCaller[i], firstCaller[nd.call] = firstCaller[nd.call], i
		}
	}
	ruleProd := make([]bool, len(g.rules))
	var work []int32
	mark := func(i int32) {
		if !prod[i] {
			prod[i] = true
			work = append(work, i)
		}
	}
	for i := int32(0); i < n; i++ {
		if g.nodes[i].final {
			mark(i)
		}
	}
	for len(work) > 0 {
		t := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range preds[off[t]:off[t+1]] {
			if p >= 0 {
				mark(p)
			} else if c := -p - 1; ruleProd[g.nodes[c].call] {
				mark(c)
			}
		}
		for r := firstStart[t]; r >= 0; r = nextStart[r] {
			ruleProd[r] = true
			for c := firstCaller[r]; c >= 0; c = nextCaller[c] {
				if prod[g.nodes[c].ret] {
					mark(c)
				}
			}
		}
	}
	return prod
}

// emptyError is the compile error of a grammar whose root accepts nothing:
// what says what it is, and the reasons recorded while building the rules
// that accept nothing (the keywords that conflict) follow.
func (b *builder) emptyError(prod []bool) *Error {
	var reasons []string
	for r, s := range b.g.rules {
		if s >= 0 && !prod[s] {
			for _, why := range b.reasons[int32(r)] {
				if !slices.Contains(reasons, why) {
					reasons = append(reasons, why)
				}
			}
		}
	}
	msg := b.emptyWhat
	if msg == "" {
		msg = "the grammar accepts no document"
	}
	if len(reasons) > 3 {
		reasons = append(reasons[:3], fmt.Sprintf("and %d more", len(reasons)-3))
	}
	if len(reasons) > 0 {
		msg += ": " + strings.Join(reasons, "; ")
	}
	return &Error{Reason: msg}
}

// noteEmpty records why the rule being built (b.rule) may accept nothing,
// for emptyError.
func (b *builder) noteEmpty(reason string) {
	if reason == "" {
		return
	}
	if b.reasons == nil {
		b.reasons = map[int32][]string{}
	}
	if !slices.Contains(b.reasons[b.rule], reason) {
		b.reasons[b.rule] = append(b.reasons[b.rule], reason)
	}
}

// prune removes every edge and epsilon edge into a node that cannot reach
// the end of its rule (prod false), so that no configuration the DFA builds
// is a dead end: a prefix the masks allow can always be completed. Without
// it a member whose value schema is false (as `not required` writes) would
// let its key through and then allow nothing. A call node is itself
// unproductive unless its rule and its return are, so calls into rules
// that accept nothing go too.
func (g *Grammar) prune(prod []bool) {
	for i := range g.nodes {
		nd := &g.nodes[i]
		k := nd.e0
		for _, e := range g.edges[nd.e0:nd.e1] {
			if prod[e.to] {
				g.edges[k] = e
				k++
			}
		}
		nd.e1 = k
		k = nd.p0
		for _, t := range g.eps[nd.p0:nd.p1] {
			if prod[t] {
				g.eps[k] = t
				k++
			}
		}
		nd.p1 = k
	}
}
