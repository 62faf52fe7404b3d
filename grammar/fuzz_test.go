package grammar

import (
	"math/rand"
	"slices"
	"testing"
)

func FuzzCompileSchema(f *testing.F) {
	for _, c := range schemaCases {
		f.Add(c.schema, c.valid[0])
	}
	f.Add(`{"$ref":"#"}`, `{}`)
	f.Add(`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `null`)
	f.Add(`{"allOf":[{"type":"string"},{"type":"integer"}]}`, `1`)
	f.Add(`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, `{}`)
	f.Add(`{"type":"integer","minimum":1,"maximum":4,"multipleOf":5}`, `5`)
	f.Add(`{"not":{"anyOf":[{"required":["a"]},{"type":"string","pattern":"^x"}]}}`, `{"b":1}`)
	f.Add(`{"type":"integer","minimum":1,"maximum":2,"not":{"enum":[1,2]}}`, `1`)
	f.Add(`{"type":"array","contains":{"type":"string"},"not":{"items":{"type":"null"}},"maxItems":3}`, `[null,"a"]`)
	f.Add(`{"if":{"type":"string"},"then":{"minLength":2},"else":{"type":"integer"}}`, `"ab"`)
	f.Add(`{"type":"object","properties":{"a":{}},"minProperties":2,"maxProperties":3,"additionalProperties":{"type":"string"}}`, `{"a":1,"x":"s"}`)
	e := env(f, "llama3")
	f.Fuzz(func(t *testing.T, schema, doc string) {
		g, err := e.comp.JSONSchema(schema)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("non-*Error error: %v", err)
			}
			return
		}
		// a schema that compiles allows a first token and some document
		mask := make([]uint64, (e.tok.VocabSize()+63)/64)
		first := g.NewMatcher()
		first.FillMask(mask)
		if slices.Max(mask) == 0 {
			t.Fatalf("%s: compiles, but the first mask is empty", schema)
		}
		witness, ok := shortestDocument(g)
		if !ok {
			t.Fatalf("%s: compiles, but the automaton has no document", schema)
		}
		if w := g.NewMatcher(); !w.AcceptBytes(witness) || !w.CanEnd() {
			t.Fatalf("%s: compiles, but its shortest document %q is not accepted", schema, witness)
		}
		// every prefix the masks allow can be finished: after each
		// accepted token some token (or the end) is allowed
		m := g.NewMatcher()
		for _, id := range e.tok.Encode(doc, false) {
			m.FillMask(mask)
			accepted := m.Accept(id)
			if accepted != (mask[id>>6]&(1<<(uint(id)&63)) != 0) {
				t.Fatal("mask and Accept disagree")
			}
			if !accepted {
				break
			}
			if m.FillMask(mask); slices.Max(mask) == 0 {
				t.Fatalf("%s: dead end after token %d of %q", schema, id, doc)
			}
		}
		m.ForcedBytes()
		m.Rollback(2)
		m.CanEnd()
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a+b*`, `[^a-z]{2,4}`, `(x|y|\d)+$`, `^\w+@\w+\.(com|org)$`, `.*`, `[\s\S]`, `a{2}`} {
		f.Add(s, "ab")
	}
	e := env(f, "qwen3")
	f.Fuzz(func(t *testing.T, pattern, input string) {
		g, err := e.comp.Regex(pattern)
		if err != nil {
			return
		}
		m := g.NewMatcher()
		m.AcceptBytes([]byte(input))
		mask := make([]uint64, (e.tok.VocabSize()+63)/64)
		m.FillMask(mask)
		// the mask and Accept agree on a spread of tokens, EOS is in the
		// mask exactly when the matcher may end, and forced bytes are
		// accepted
		for id := int32(0); int(id) < e.tok.VocabSize(); id += 997 {
			allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
			if m.Accept(id) != allowed {
				t.Fatalf("%q after %q: mask and Accept disagree on token %d", pattern, input, id)
			}
			if allowed {
				m.Rollback(1)
			}
		}
		if eos := mask[e.eos>>6]&(1<<(uint(e.eos)&63)) != 0; eos != m.CanEnd() {
			t.Fatalf("%q after %q: EOS in mask %v, CanEnd %v", pattern, input, eos, m.CanEnd())
		}
		if fb := m.ForcedBytes(); len(fb) > 0 && !m.AcceptBytes(fb) {
			t.Fatalf("%q after %q: forced bytes %q refused", pattern, input, fb)
		}
		m.Done()
	})
}

func FuzzMatcher(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	e := env(f, "llama3")
	g, err := e.comp.JSONSchema(propertySchemas[3])
	if err != nil {
		f.Fatal(err)
	}
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := g.NewMatcher()
		rng := rand.New(rand.NewSource(int64(len(ops))))
		for i, op := range ops {
			switch op % 4 {
			case 0, 1:
				m.FillMask(mask)
				if id := randomBit(rng, mask); id >= 0 && !m.Accept(id) {
					t.Fatal("allowed token rejected")
				}
				_ = i
			case 2:
				m.Rollback(int(op) % 3)
			case 3:
				m.Accept(int32(op) * 997)
				m.ForcedBytes()
			}
		}
	})
}

// shortestDocument builds a shortest byte string of g's language from its
// automaton (shortest derivations over the rule network, ties broken by
// fewer moves so the walk always progresses); ok is false when it finds
// none. Callers check the result with a Matcher, so it does not have to be
// trusted.
func shortestDocument(g *Grammar) (doc []byte, ok bool) {
	const inf = int64(1) << 62
	cost := make([]int64, len(g.nodes)) // (bytes << 24) + moves to the end of the node's rule
	for i := range cost {
		cost[i] = inf
	}
	ruleCost := func(r int32) int64 { return cost[g.rules[r]] }
	add := func(a, b int64) int64 {
		if a >= inf || b >= inf {
			return inf
		}
		return a + b
	}
	for changed := true; changed; {
		changed = false
		for i := len(g.nodes) - 1; i >= 0; i-- {
			n := &g.nodes[i]
			c := cost[i]
			if n.final {
				c = 0
			}
			for _, e := range g.edges[n.e0:n.e1] {
				c = min(c, add(cost[e.to], 1<<24+1))
			}
			for _, t := range g.eps[n.p0:n.p1] {
				c = min(c, add(cost[t], 1))
			}
			if n.call >= 0 {
				c = min(c, add(add(ruleCost(n.call), cost[n.ret]), 1))
			}
			if c < cost[i] {
				cost[i], changed = c, true
			}
		}
	}
	var walk func(n int32, depth int) bool
	walk = func(n int32, depth int) bool {
		for depth < 10000 {
			nd := &g.nodes[n]
			c := cost[n]
			switch {
			case c >= inf:
				return false
			case nd.final && c == 0:
				return true
			}
			moved := false
			for _, e := range g.edges[nd.e0:nd.e1] {
				if add(cost[e.to], 1<<24+1) == c {
					doc = append(doc, e.lo)
					n, moved = e.to, true
					break
				}
			}
			if !moved {
				for _, t := range g.eps[nd.p0:nd.p1] {
					if add(cost[t], 1) == c {
						n, moved = t, true
						break
					}
				}
			}
			if !moved && nd.call >= 0 && add(add(ruleCost(nd.call), cost[nd.ret]), 1) == c {
				if !walk(g.rules[nd.call], depth+1) {
					return false
				}
				n, moved = nd.ret, true
			}
			if !moved {
				return false
			}
			depth++
		}
		return false
	}
	if !walk(g.rules[0], 0) {
		return nil, false
	}
	return doc, true
}
