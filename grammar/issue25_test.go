package grammar

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// soccerSchema is a public function-calling benchmark's parameters, with an
// untyped property added (a free-form value).
const soccerSchema = `{"type":"object","properties":{"team_name":{"type":"string"},"include_stats":{"type":"boolean"},"a":{}},"required":["team_name"]}`

// TestFreeFormNestingMaskAgreesWithAccept: a free-form value nests objects and
// arrays; at every depth the mask offers a token iff Accept takes it (acceptDoc
// fails the test otherwise), the depth bound is the grammar's (maxAnyDepth),
// and a prefix the mask allows can always be finished. Before, the free-form
// rule had two call sites per container, each level doubled the DFA state's
// configurations, and about 15 levels down the mask offered `":` which Accept
// refused.
func TestFreeFormNestingMaskAgreesWithAccept(t *testing.T) {
	e := env(t, "qwen3")
	for _, strict := range []bool{false, true} {
		g, err := e.comp.JSONSchemaStrict(soccerSchema, strict)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []int{1, 2, 15, 16, 17, 24, maxAnyDepth, maxAnyDepth + 1, maxAnyDepth + 8} {
			obj := `{"team_name":"x","a":` + strings.Repeat(`{"b":`, d) + "1" + strings.Repeat("}", d) + "}"
			arr := `{"team_name":"x","a":` + strings.Repeat(`[`, d) + "1" + strings.Repeat("]", d) + "}"
			mixed := `{"team_name":"x","a":` + strings.Repeat(`{"b":[1,`, d) + "{}" + strings.Repeat("]}", d) + "}"
			for _, doc := range []string{obj, arr, mixed} {
				want := d <= maxAnyDepth
				if d*2 > maxAnyDepth && doc == mixed {
					want = false
				}
				if got := acceptDoc(t, e, g, doc); got != want {
					t.Errorf("strict %v, depth %d: accepted %v, want %v: %.80s", strict, d, got, want, doc)
				}
			}
		}
	}
	// the same schema as a tool's parameters
	part, err := json.Marshal(Sequence(Literal(`{"name": "f", "arguments": `), SchemaPart(json.RawMessage(soccerSchema)), Literal(`}`)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.comp.Compose(string(part))
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"name": "f", "arguments": {"team_name":"x","a":` + strings.Repeat(`{"b":`, 20) + "1" + strings.Repeat("}", 20) + "}}"
	if !acceptDoc(t, e, g, doc) {
		t.Errorf("tool call with 20 levels of free-form nesting refused")
	}
}

// toolCall is the composition api/tools.go builds for one call of a function
// with parameters schema (Hermes syntax), with a reasoning block before it
// when think is set, and free text before it when auto is set.
func toolCall(schema string, think, auto bool) Part {
	call := Sequence(Literal("<tool_call>\n"), Literal(`{"name": "f", "arguments": `), SchemaPart(json.RawMessage(schema)), Literal("}\n</tool_call>"))
	p := Part{Repeat: &Repeat{Part: call, Min: 1, Max: 1}}
	if auto {
		p = Sequence(Part{Text: &FreeText{Without: "<tool_call>"}}, Part{Repeat: &Repeat{Part: call, Min: 0 + 1, Max: 1}})
	}
	if think {
		p = Sequence(Part{Text: &FreeText{Without: "</think>"}}, Literal("</think>\n\n"), p)
	}
	return p
}

// TestToolArgumentsCompiledLikeResponseFormat: the arguments of a tool call
// accept exactly what response_format accepts for the same schema, strict or
// not: no undeclared key where strict closes the object, and no member twice.
// Before, compositions compiled their schemas without strictness or member
// tracking: `{"team_name":"x","type":"string"}` and `{"team_name":"x","team_name":"y"}`
// were accepted as arguments.
func TestToolArgumentsCompiledLikeResponseFormat(t *testing.T) {
	e := env(t, "qwen3")
	schemas := []string{
		`{"type":"object","properties":{"team_name":{"type":"string"},"include_stats":{"type":"boolean"}},"required":["team_name"]}`,
		`{"type":"object","properties":{"table":{"type":"array"},"alpha":{"type":"integer"}},"required":["table"],"additionalProperties":false}`,
	}
	docs := []string{
		`{"team_name":"2s","include_stats":true}`, `{"team_name":"x"}`,
		`{"team_name":"x","type":"string"}`, `{"team_name":"x","team_name":"y"}`,
		`{"include_stats":true,"team_name":"x","include_stats":false}`,
		`{"table":[],"alpha":4}`, `{"table":[],"alpha":4,"alpha":4}`, `{"table":[1],"beta":1}`,
	}
	for _, strict := range []bool{true, false} {
		c := NewCompiler(e.tok, []int32{e.eos}, Options{Strict: strict})
		for _, schema := range schemas {
			rf, err := c.JSONSchema(schema)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []struct{ think, auto bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
				spec, err := ComposeSpec(toolCall(schema, mode.think, mode.auto))
				if err != nil {
					t.Fatal(err)
				}
				tg, err := c.Compose(spec.Text)
				if err != nil {
					t.Fatal(err)
				}
				prefix := "<tool_call>\n"
				if mode.auto {
					prefix = "Let me call it.<tool_call>\n"
				}
				if mode.think {
					prefix = "hmm</think>\n\n" + prefix
				}
				for _, doc := range docs {
					want := acceptDoc(t, e, rf, doc)
					got := acceptDoc(t, e, tg, prefix+`{"name": "f", "arguments": `+doc+"}\n</tool_call>")
					if got != want {
						t.Errorf("strict %v think %v auto %v, %s: arguments %s accepted %v, response_format %v",
							strict, mode.think, mode.auto, schema, doc, got, want)
					}
					if repeated := strings.Count(doc, `"alpha"`) > 1 || strings.Count(doc, `"team_name"`) > 1 || strings.Count(doc, `"include_stats"`) > 1; repeated && got {
						t.Errorf("strict %v: arguments %s repeat a member", strict, doc)
					}
				}
			}
		}
	}
}

// TestDFAExhaustionIsReported: an ambiguous grammar (two call sites per container: the old
// free-form rule's shape) doubles its configurations at each level of nesting until its DFA
// runs out of states (what made the mask offer tokens Accept refused about 16 levels down) or a
// state grows past maxConfigs. A closure refused for that makes transitions dead that a mask
// may have counted on (masks come from shortcuts over parts of a state), so from then on the
// grammar says it is exhausted: FillMaskWithin returns ErrDFAExhausted and the runner fails
// the request with that reason instead of "constraint rejected token". Mask and Accept never
// disagree without it.
func TestDFAExhaustionIsReported(t *testing.T) {
	e := env(t, "qwen3")
	defer func(n int) { maxConfigs = n }(maxConfigs)
	maxConfigs = 8192
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	g, err := c.GBNF("root ::= v\nv ::= \"{\" ( \"}\" | (m \",\")* m \"}\" ) | \"1\"\nm ::= \"\\\"\" [a-z]* \"\\\":\" v\n")
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	far := time.Now().Add(time.Hour)
	for i, id := range e.tok.Encode(strings.Repeat(`{"b":`, 40), false) {
		if err := m.FillMaskWithin(mask, far); err != nil {
			if !errors.Is(err, ErrDFAExhausted) {
				t.Fatalf("token %d: %v", i, err)
			}
			t.Logf("DFA exhausted after %d tokens: %v", i, err)
			return
		}
		allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
		if ok := m.Accept(id); ok != allowed {
			// the mask (from a shortcut over part of the state) and Accept (the whole closure,
			// over the bound) disagree only when the grammar says it is exhausted
			if !m.Exhausted() || !errors.Is(m.FillMaskWithin(mask, far), ErrDFAExhausted) {
				t.Fatalf("token %d (%q): mask %v, Accept %v, with the DFA not reported exhausted", i, e.tok.TokenBytes(id), allowed, ok)
			}
			t.Logf("DFA exhausted at token %d (%q)", i, e.tok.TokenBytes(id))
			return
		}
		if !allowed {
			t.Fatalf("token %d refused", i)
		}
	}
	t.Fatal("40 levels of an ambiguous grammar never exhausted its DFA")
}
