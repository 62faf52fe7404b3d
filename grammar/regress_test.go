package grammar

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
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
		// some control chars only: each escape form of exactly those, either hex case
		{`{"type":"string","pattern":"^[\\u0001-\\u000b\\u001a]*$"}`,
			[]string{`"\u000A\u000a\n\t\u0009\u000b\u000B\u001a\u001A\u0001\b"`, `""`},
			[]string{`"\u000c"`, `"\f"`, `"\u001b"`, `"\u0000"`, `"\r"`, `"\u0010"`, `"a"`}},
		{`{"type":"string","pattern":"^[/\"]*$"}`,
			[]string{`"\/\"/"`},
			[]string{`"\\"`, `"\u002f"`, `"\u0022"`, `"\n"`}},
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
	if testing.Short() {
		t.Skip("exhaustive mask sweep (~20 s); the full run checks it")
	}
	e := env(t, "llama3")
	schemas := append(slices.Clone(propertySchemas),
		`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"object","properties":{"key":{"type":"string","pattern":"^[0-9a-zA-Z_-]{1,40}$"},"value":{"type":"string","minLength":1,"maxLength":30}},"additionalProperties":false},"maxItems":20}},"additionalProperties":false}`,
		`{"type":"array","items":{"type":"array","items":{"type":"integer","minimum":-50,"maximum":50},"maxItems":5},"maxItems":6}`)
	schemas = append(schemas, maskPathSchemas()...)
	rng := rand.New(rand.NewSource(11))
	mask := make([]uint64, e.comp.vt.words)
	checked, local := 0, 0
	for si, schema := range schemas {
		g, err := e.comp.JSONSchema(schema)
		if !expectRefusal(t, si, err) {
			continue
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
				// the reference is the plain walk of the whole vocabulary
				g.toks = g.toks[:0]
				g.walk(g.vt.trie, s)
				want := slices.Clone(g.toks)
				acc := g.states[s].accept
				g.mu.Unlock()
				ref := make([]uint64, len(mask))
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

// maskPathSchemas exercise every way maskOf builds a mask: states split by
// call stack (many optional properties next to open keys), first-byte
// dispatch into free string bodies (key exclusions, minLength, patterns
// with a free tail, non-ASCII chars entering a free body), length-only
// strings (per-char-count tables) and the plain walk.
func maskPathSchemas() []string {
	var props []string
	for i := 0; i < 40; i++ {
		props = append(props, fmt.Sprintf(`"p%02d_%s":{"type":%q}`, i, strings.Repeat("k", i%5), []string{"integer", "string", "boolean"}[i%3]))
	}
	return []string{
		`{"type":"object","properties":{` + strings.Join(props, ",") + `}}`,
		`{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":["p03_kkk","p20_"],"additionalProperties":{"type":"string","maxLength":4}}`,
		`{"type":"object","properties":{"a":{"type":"string","maxLength":12},"b":{"type":"string","minLength":3,"maxLength":5},"c":{"type":"string","minLength":2},"d":{"type":"string","maxLength":0}},"required":["a","b","c","d"]}`,
		`{"type":"array","items":{"type":"string","maxLength":3},"maxItems":8}`,
		`{"type":"object","properties":{"é":{"type":"integer"},"ab":{"type":"string","pattern":"^x"},"abc":{"type":"string","pattern":"y$"}}}`,
		`{"type":"object","propertyNames":{"maxLength":3},"additionalProperties":{"type":"integer"}}`,
		// bounded repetitions: runs of one class (node.run chains) and
		// unanchored patterns whose states survive any plain chars
		// long strings: shared rules for escapes and non-ASCII chars, and
		// one rule for both uses of the same constraints
		`{"type":"object","properties":{"a":{"type":"string","maxLength":600},"b":{"type":"string","maxLength":600},"c":{"type":"string","pattern":"^[^x]{2,600}$"}},"required":["a","b","c"]}`,
		`{"type":"object","properties":{"h":{"type":"string","pattern":"[A-Fa-f0-9]{8}"},"e":{"type":"string","pattern":"^[a-z0-9._%+-]{1,20}@[a-z]{2,10}\\.com$"},"n":{"type":"string","pattern":"^[0-9]{9}$"},"d":{"type":"string","format":"date-time"},"k":{"type":"string","pattern":"^[a-zA-Z0-9_-]{12}$"}},"required":["h","e","n","d","k"]}`,
	}
}

// maskPathDocs are documents for maskPathSchemas (same order) that go
// through escapes, multi-byte chars and exact length limits.
var maskPathDocs = []string{
	`{"p00_":1,"p01_k":"a\u001fb\"c","p05_":true,"p39_kkkk":7}`,
	`{"x":"é😀","p03_kkk":2,"zz":"\n\t","p20_":true,"yy":"\\\/"}`,
	`{"a":"héllo wörld","b":"\u0000\"😀","c":"\u001Fxx","d":""}`,
	`["abc","\u001f\"é","","😀😀😀"]`,
	`{"é":3,"ab":"xé\"","abc":"\u0001y"}`,
	`{"abc":1,"é😀":2,"\n":3}`,
	`{"a":"héllo \"wörld\" 日本語\u0001","b":"😀😀 ok\n","c":"\\/é😀 abc\t"}`,
	`{"h":"xyz 0123abcdEF é! zz","e":"john.doe_1%x@example.com","n":"123456789","d":"2024-01-15T10:20:30Z","k":"Ab_9-xYz0123"}`,
}

// TestMaskPathsMatchFullWalk feeds maskPathDocs token by token and checks
// every mask on the way against the plain walk of the whole vocabulary.
func TestMaskPathsMatchFullWalk(t *testing.T) {
	for _, name := range testTokenizers() {
		e := env(t, name)
		mask := make([]uint64, e.comp.vt.words)
		checked := 0
		for i, schema := range maskPathSchemas() {
			g, err := e.comp.JSONSchema(schema)
			if err != nil {
				t.Fatalf("%s: schema %d: %v", name, i, err)
			}
			doc := maskPathDocs[i]
			m := g.NewMatcher()
			for k, id := range e.tok.Encode(doc, false) {
				m.FillMask(mask)
				ref := fullWalkMask(e, g, m.cur())
				if !slices.Equal(mask, ref) {
					t.Fatalf("%s: schema %d token %d of %q: mask differs from the full walk", name, i, k, doc)
				}
				// walkVocab without the hole machinery (the path of states
				// on the root stack) must agree too
				g.mu.Lock()
				g.toks = g.toks[:0]
				direct := g.walkVocab(m.cur(), nil)
				if direct == nil {
					direct = make([]uint64, len(mask))
				}
				for _, id := range g.toks {
					direct[id>>6] |= 1 << (uint(id) & 63)
				}
				g.mu.Unlock()
				ref[e.eos>>6] &^= 1 << (uint(e.eos) & 63)
				if !slices.Equal(direct, ref) {
					t.Fatalf("%s: schema %d token %d of %q: walkVocab differs from the full walk", name, i, k, doc)
				}
				checked++
				if !m.Accept(id) {
					t.Fatalf("%s: schema %d: %q rejected at token %d", name, i, doc, k)
				}
			}
			m.FillMask(mask)
			if !slices.Equal(mask, fullWalkMask(e, g, m.cur())) || !m.CanEnd() {
				t.Fatalf("%s: schema %d: wrong mask or cannot end after %q", name, i, doc)
			}
		}
		t.Logf("%s: %d masks checked", name, checked)
	}
}

// fullWalkMask is the reference mask of state s: the plain walk of the
// whole vocabulary trie, plus EOS where the grammar may end.
func fullWalkMask(e *tokEnv, g *Grammar, s int32) []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.toks = g.toks[:0]
	g.walk(g.vt.trie, s)
	ref := make([]uint64, g.vt.words)
	for _, id := range g.toks {
		ref[id>>6] |= 1 << (uint(id) & 63)
	}
	if g.states[s].accept {
		ref[e.eos>>6] |= 1 << (uint(e.eos) & 63)
	}
	return ref
}

// TestMergeMasks: the union of cached masks in every representation.
func TestMergeMasks(t *testing.T) {
	const words = 40
	rng := rand.New(rand.NewSource(3))
	randBits := func() []uint64 {
		b := make([]uint64, words)
		for i := range b {
			b[i] = rng.Uint64() & rng.Uint64() & rng.Uint64()
		}
		return b
	}
	randToks := func(n int) []int32 {
		var ts []int32
		for i := 0; i < n; i++ {
			ts = append(ts, int32(rng.Intn(words*64)))
		}
		return ts
	}
	for trial := 0; trial < 50; trial++ {
		var subs []*cachedMask
		for k := 0; k < 1+trial%4; k++ {
			switch rng.Intn(3) {
			case 0:
				subs = append(subs, &cachedMask{dense: randBits(), add: randToks(3)})
			case 1:
				subs = append(subs, &cachedMask{base: randBits(), add: randToks(5)})
			default:
				subs = append(subs, &cachedMask{add: randToks(rng.Intn(1500))})
			}
		}
		want := make([]uint64, words)
		part := make([]uint64, words)
		for _, c := range subs {
			c.fill(part)
			for i := range want {
				want[i] |= part[i]
			}
		}
		got := make([]uint64, words)
		mergeMasks(subs, words).fill(got)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: merged mask differs from the union", trial)
		}
	}
}

// excludeDFA accepts exactly the strings that are not one of the names,
// prefixes and extensions of names included; every state is total.
func TestExcludeDFA(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	alphabet := []string{"a", "b", "ab", "é", "中", "😀", "_", ""}
	word := func() string {
		var sb strings.Builder
		for range rng.Intn(4) {
			sb.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		return sb.String()
	}
	for iter := 0; iter < 300; iter++ {
		names := map[string]bool{}
		var list []string
		for range rng.Intn(6) {
			w := word()
			names[w] = true
			list = append(list, w, w) // duplicates are allowed
		}
		d := chardfa.Exclude(list)
		tot := totalStates(d)
		for i := range tot {
			if !tot[i] || !coversAll(d.Trans[i]) {
				t.Fatalf("names %q: state %d is not total", list, i)
			}
		}
		for range 40 {
			w := word()
			if d.Matches(w) == names[w] {
				t.Fatalf("names %q: %q accepted=%v", list, w, d.Matches(w))
			}
		}
		for n := range names {
			if d.Matches(n) {
				t.Fatalf("names %q: name %q accepted", list, n)
			}
		}
	}
}
