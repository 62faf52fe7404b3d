package grammar

import (
	"encoding/json"
	"errors"
	"testing"
)

// pathSeeds are parameter schemas of the kinds function-calling benchmarks use: nested objects,
// untyped values, objects without properties, enums, arrays of objects.
var pathSeeds = []string{
	soccerSchema,
	`{"type":"object","properties":{"table":{"type":"array"},"alpha":{"type":"integer"}},"required":["table"],"additionalProperties":false}`,
	`{"type":"object","properties":{"a":{"type":"object"},"b":{}}}`,
	`{"type":"object","properties":{"unit":{"enum":["c","f"]},"loc":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number"}},"required":["lat","lon"]}},"required":["loc"]}`,
	`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}}}}}}`,
	`{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"object"},{"type":"null"}]}},"required":["v"]}`,
	`{"type":"object","properties":{"n":{"$ref":"#"}, "x":{"type":"boolean"}}}`,
}

// pathTokens are the structural tokens a random walk prefers, so that it nests and closes
// values rather than wandering inside one string.
var pathTokens = []string{"{", "}", "[", "]", `{"`, `":`, `"`, `",`, `,"`, ",", "1", "true", "null", `"a`, `":{"`, `":[`, "}}", "]}", "\n", "</think>", "<tool_call>", "}\n</tool_call>", "<function=f>", "</function>", "<f>", "</f>", "<f", "<fx>", "</fx>"}

// pathSpecs compiles schema through every constraint path the API builds: response_format,
// tool calls required (any of two functions, parallel), named, auto (text first), structural
// tags of both shapes, and each after a reasoning block.
func pathSpecs(schema string) []Part {
	call := func(name string) Part {
		return Sequence(Literal("<tool_call>\n"), Literal(`{"name": "`+name+`", "arguments": `), SchemaPart(json.RawMessage(schema)), Literal("}\n</tool_call>"))
	}
	sep := Literal("\n")
	required := Part{Repeat: &Repeat{Part: Alternatives(call("f"), call("g")), Sep: &sep, Min: 1, Max: -1}}
	named := Part{Repeat: &Repeat{Part: call("f"), Min: 1, Max: 1}}
	auto := Sequence(Part{Text: &FreeText{Without: "<tool_call>"}}, Part{Repeat: &Repeat{Part: call("f"), Min: 0, Max: -1}})
	rf := SchemaPart(json.RawMessage(schema))
	base := []Part{rf, required, named, auto}
	if json.Valid([]byte(schema)) {
		// structural tags, both shapes: a schema-constrained structure behind a trigger among
		// free text, and a format tree with any_text and at_least_one
		for _, raw := range []string{
			`{"structures":[{"begin":"<function=f>","schema":` + schema + `,"end":"</function>"},{"begin":"<function=g>","schema":{},"end":"</function>"}],"triggers":["<function=","<tool_call>"]}`,
			`{"format":{"type":"triggered_tags","triggers":["<f"],"at_least_one":true,"tags":[{"begin":"<f>","content":{"type":"json_schema","json_schema":` + schema + `},"end":"</f>"},{"begin":"<fx>","content":{"type":"any_text"},"end":"</fx>"}]}}`,
		} {
			if st, err := StructuralTag([]byte(raw)); err == nil {
				base = append(base, st)
			}
		}
	}
	var out []Part
	for _, p := range base {
		out = append(out, p, Sequence(Part{Text: &FreeText{Without: "</think>", MaxChars: 64}}, Literal("</think>\n\n"), p))
	}
	return out
}

// FuzzConstraintPaths compiles a random schema through every constraint path and walks random
// token sequences, checking at every step that the mask allows exactly what Accept takes (for
// the token chosen, the structural tokens and a few drawn from the vocabulary) and that an
// allowed prefix never leads to a state that allows nothing.
func FuzzConstraintPaths(f *testing.F) {
	for i, s := range pathSeeds {
		f.Add(s, uint8(i), []byte{0, 1, 2, 3, 0, 6, 5, 0, 1, 2, 3, 4, 16, 17, 0, 14, 0, 14, 0, 14, 0, 14, 200, 1, 9, 12})
	}
	// the structural-tag paths (pathSpecs' 9th to 12th), strict and not
	for i, which := range []uint8{16, 19, 20, 23} {
		f.Add(pathSeeds[i], which, []byte{18, 22, 0, 6, 5, 1, 23, 18, 24, 0, 1, 2, 3, 4, 27, 25})
	}
	e := env(f, "qwen3")
	strict := NewCompiler(e.tok, []int32{e.eos}, Options{Strict: true})
	ids := make([]int32, len(pathTokens))
	for i, s := range pathTokens {
		if enc := e.tok.Encode(s, false); len(enc) == 1 {
			ids[i] = enc[0]
		} else {
			ids[i] = -1
		}
	}
	n := int32(e.tok.VocabSize())
	f.Fuzz(func(t *testing.T, schema string, which uint8, walk []byte) {
		if len(walk) > 96 {
			walk = walk[:96] // a fresh DFA state's first mask costs milliseconds
		}
		c := e.comp
		if which&1 != 0 {
			c = strict
		}
		paths := pathSpecs(schema)
		p := paths[int(which>>1)%len(paths)]
		if !json.Valid([]byte(schema)) {
			return // a composition holds schemas as JSON: the API never builds one of invalid JSON
		}
		spec, err := ComposeSpec(p)
		if err != nil {
			t.Fatal(err)
		}
		g, err := c.Compose(spec.Text)
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("non-*Error compile error: %v", err)
			}
			return
		}
		m := g.NewMatcher()
		mask := make([]uint64, (n+63)/64)
		allowed := func(id int32) bool { return id >= 0 && id < n && mask[id>>6]&(1<<(uint(id)&63)) != 0 }
		check := func(id int32) {
			if id < 0 || id >= n {
				return
			}
			ok := m.Accept(id)
			if ok != allowed(id) {
				t.Fatalf("%s (path %d): after %d tokens, token %d %q: mask %v, Accept %v", schema, which>>1, len(m.hist)-1, id, e.tok.TokenBytes(id), allowed(id), ok)
			}
			if ok {
				m.Rollback(1)
			}
		}
		for i, b := range walk {
			m.FillMask(mask)
			var any []int32
			for _, id := range ids {
				if allowed(id) {
					any = append(any, id)
				}
				check(id)
			}
			check(int32(uint32(b) * 2654435761 % uint32(n)))
			check(int32(uint32(i+1)*40503%uint32(n)) ^ int32(b))
			var pick int32 = -1
			if b < 192 && len(any) > 0 {
				pick = any[int(b)%len(any)]
			} else {
				// the k-th allowed token, k from b
				k := int(b) * 7919
				for w, word := range mask {
					if word != 0 {
						for bit := 0; bit < 64; bit++ {
							if word&(1<<bit) != 0 {
								if k == 0 {
									pick = int32(w*64 + bit)
								}
								k--
							}
						}
					}
					if pick >= 0 {
						break
					}
				}
			}
			if pick < 0 {
				for w, word := range mask {
					if word != 0 {
						for bit := 0; bit < 64 && pick < 0; bit++ {
							if word&(1<<bit) != 0 {
								pick = int32(w*64 + bit)
							}
						}
						break
					}
				}
			}
			if pick < 0 {
				if !m.CanEnd() && !m.Done() {
					t.Fatalf("%s (path %d): dead end after %d tokens: nothing allowed and the output cannot end", schema, which>>1, len(m.hist)-1)
				}
				return
			}
			if pick == e.eos {
				return
			}
			if !m.Accept(pick) {
				t.Fatalf("%s (path %d): token %d %q allowed by the mask but refused", schema, which>>1, pick, e.tok.TokenBytes(pick))
			}
		}
	})
}

// FuzzGBNFBudget parses and builds random GBNF text (repetition bombs among the seeds): it never panics, refuses with an *Error, stays
// within its node budget (the size estimate refuses bombs before building), and a grammar that
// compiles agrees with its matcher on what comes first.
func FuzzGBNFBudget(f *testing.F) {
	for _, s := range []string{
		`root ::= "a" | "b"`, `root ::= [a-z]+ ("," [a-z]+)*`, `root ::= x{2,5}` + "\nx ::= \"ab\" | [0-9]",
		`root ::= (("a"{1000}){1000}){1000}`, `root ::= ("a"{10}){0,}`, "root ::= a\na ::= \"(\" a? \")\"",
		`root ::= [^\n]{3} "\u00e9" .`, `root ::= "x" # comment`, `root ::= r0 | r1` + "\nr0 ::= .+\nr1 ::= .+",
	} {
		f.Add(s, []byte{0, 1, 2})
	}
	e := env(f, "qwen3")
	c := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxStates: 200000}})
	n := int32(e.tok.VocabSize())
	f.Fuzz(func(t *testing.T, src string, walk []byte) {
		g, err := c.GBNF(src)
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("non-*Error: %v", err)
			}
			return
		}
		if len(g.nodes) > 200000+1 {
			t.Fatalf("%d nodes over the budget", len(g.nodes))
		}
		m := g.NewMatcher()
		mask := make([]uint64, (n+63)/64)
		for i, b := range walk {
			if i >= 32 {
				break
			}
			m.FillMask(mask)
			id := int32(uint32(b)*2654435761%uint32(n)) ^ int32(i)
			if id < 0 || id >= n {
				continue
			}
			allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
			if ok := m.Accept(id); ok != allowed {
				t.Fatalf("%q: token %d %q: mask %v, Accept %v", src, id, e.tok.TokenBytes(id), allowed, ok)
			}
		}
	})
}
