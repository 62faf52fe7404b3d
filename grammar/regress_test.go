package grammar

import (
	"math/rand"
	"slices"
	"testing"
)

// TestEscapedKeysCannotDodgeExclusions: a key spelled with \u escapes is
// the same key once decoded, so it must not slip past the exclusion of
// defined names or past the pattern it matches, and an escape always has
// four hex digits (MaskBench found `"\u0061"` accepted as an extra key
// whose value skipped the schema of "a", via a 3-digit \u00X escape).
func TestEscapedKeysCannotDodgeExclusions(t *testing.T) {
	e := env(t, "llama3")
	cases := []struct {
		schema  string
		valid   []string
		invalid []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"}}}`,
			[]string{`{"a":1,"b":"s"}`, `{"b\u0061":"s"}`, `{"\u001f":"s"}`},
			[]string{`{"\u0061":"s"}`, `{"a":1,"\u0061":"s"}`, `{"\u001":"s"}`, `{"\u006":"s"}`}},
		{`{"type":"object","patternProperties":{"^x-":{"type":"integer"}}}`,
			[]string{`{"x-a":1}`, `{"y":"s"}`},
			[]string{`{"x\u002da":"s"}`, `{"\u0078-a":"s"}`}},
		{`{"type":"string","pattern":"^[^a]*$"}`,
			[]string{`"b\u001fc"`, `"\n"`},
			[]string{`"\u001"`, `"\u0061"`, `"a"`}},
	}
	for _, tc := range cases {
		g, err := e.comp.JSONSchema(tc.schema)
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		for _, d := range tc.valid {
			if !acceptDoc(t, e, g, d) || !acceptBytes(g, d) {
				t.Errorf("%s: valid %s rejected", tc.schema, d)
			}
		}
		for _, d := range tc.invalid {
			if acceptDoc(t, e, g, d) || acceptBytes(g, d) {
				t.Errorf("%s: invalid %s accepted", tc.schema, d)
			}
		}
	}
}

// TestDuplicateKeys: a defined property cannot appear twice, nor come back
// as an extra key. Extra keys (not named in properties) can repeat: no
// finite automaton can remember an unbounded set of keys, and a repeat is
// matched against the same schema both times, so the document still
// validates whichever value a parser keeps.
func TestDuplicateKeys(t *testing.T) {
	e := env(t, "llama3")
	for _, tc := range []struct {
		schema, doc string
		ok          bool
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"}}}`, `{"a":1,"a":2}`, false},
		{`{"type":"object","properties":{"a":{"type":"integer"}}}`, `{"a":1,"b":2,"a":3}`, false},
		{`{"type":"object","properties":{"x-a":{"type":"integer"}},"patternProperties":{"^x-":{"type":"integer"}}}`, `{"x-a":1,"x-a":2}`, false},
		{`{"type":"object","required":["r"],"additionalProperties":{"type":"integer"}}`, `{"r":1,"r":2}`, false},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"x":1,"x":2}`, true},
	} {
		g, err := e.comp.JSONSchema(tc.schema)
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if got := acceptBytes(g, tc.doc); got != tc.ok {
			t.Errorf("%s: %s accepted=%v, want %v", tc.schema, tc.doc, got, tc.ok)
		}
	}
}

// TestLocalMasksMatchFullWalk: masks built from the hole-rooted (stack
// independent) part plus the context-dependent subtrees must equal the
// plain walk of the whole vocabulary from the real state.
func TestLocalMasksMatchFullWalk(t *testing.T) {
	e := env(t, "llama3")
	schemas := append(slices.Clone(propertySchemas),
		`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"object","properties":{"key":{"type":"string","pattern":"^[0-9a-zA-Z_-]{1,40}$"},"value":{"type":"string","minLength":1,"maxLength":30}},"additionalProperties":false},"maxItems":20}},"additionalProperties":false}`,
		`{"type":"array","items":{"type":"array","items":{"type":"integer","minimum":-50,"maximum":50},"maxItems":5},"maxItems":6}`)
	rng := rand.New(rand.NewSource(11))
	mask := make([]uint64, e.comp.vt.words)
	checked, local := 0, 0
	for si, schema := range schemas {
		g, err := e.comp.JSONSchema(schema)
		if err != nil {
			continue // unsupported cases are covered elsewhere
		}
		for run := 0; run < 6; run++ {
			m := g.NewMatcher()
			for step := 0; step < 120; step++ {
				s := m.cur()
				if s < 0 {
					break
				}
				m.FillMask(mask)
				g.mu.Lock()
				g.toks = g.toks[:0]
				if ds := g.states[s]; ds.strq >= 0 {
					g.walk(g.vt.str[ds.strq].close, s)
				} else {
					g.walk(g.vt.trie, s)
				}
				want := slices.Clone(g.toks)
				var base []uint64
				if ds := g.states[s]; ds.strq >= 0 {
					base = g.vt.str[ds.strq].in
				}
				acc := g.states[s].accept
				g.mu.Unlock()
				ref := make([]uint64, len(mask))
				copy(ref, base)
				for _, id := range want {
					ref[id>>6] |= 1 << (uint(id) & 63)
				}
				if acc {
					ref[e.eos>>6] |= 1 << (uint(e.eos) & 63)
				}
				if !slices.Equal(ref, mask) {
					t.Fatalf("schema %d step %d: mask differs from the full walk", si, step)
				}
				checked++
				pick := randomBit(rng, mask)
				if pick < 0 || !m.Accept(pick) || pick == e.eos {
					break
				}
			}
		}
		g.mu.Lock()
		for _, ds := range g.states {
			if ds.local != nil {
				local++
			}
		}
		g.mu.Unlock()
	}
	if checked < 200 || local < 20 {
		t.Fatalf("only %d masks checked, %d local masks built", checked, local)
	}
	t.Logf("%d masks checked, %d local masks", checked, local)
}
