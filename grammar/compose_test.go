package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// toolCallPart is Qwen/Hermes tool-call syntax for one function, as api builds it.
func toolCallPart(name, schema string) Part {
	return Sequence(Literal("<tool_call>\n{\"name\": \""+name+"\", \"arguments\": "), SchemaPart(json.RawMessage(schema)), Literal("}\n</tool_call>"))
}

func composeGrammar(t *testing.T, c *Compiler, p Part) *Grammar {
	t.Helper()
	spec, err := ComposeSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Compose(spec.Text)
	if err != nil {
		t.Fatalf("compose %s: %v", spec.Text, err)
	}
	return g
}

func TestComposeToolCalls(t *testing.T) {
	e := env(t, "qwen3")
	weather := `{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}`
	calls := Part{Repeat: &Repeat{Part: Alternatives(toolCallPart("get_weather", weather), toolCallPart("noop", `{"type":"object","properties":{},"additionalProperties":false}`)),
		Sep: &Part{Lit: "\n"}, Min: 1, Max: -1}}
	required := composeGrammar(t, e.comp, calls)
	auto := composeGrammar(t, e.comp, Sequence(TextUntil("<tool_call>"), Part{Alt: []Part{{Seq: []Part{{Lit: "<"}, {Lit: "!"}}}, calls}}))
	one := `<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city":"Paris","days":3}}` + "\n</tool_call>"
	noop := `<tool_call>` + "\n" + `{"name": "noop", "arguments": {}}` + "\n</tool_call>"
	for _, c := range []struct {
		g    *Grammar
		doc  string
		want bool
	}{
		{required, one, true},
		{required, one + "\n" + noop, true},
		{required, one + noop, false},
		{required, "", false},
		{required, "hi " + one, false},
		{required, strings.Replace(one, `"days":3`, `"days":9`, 1), false},
		{required, strings.Replace(one, "get_weather", "get_weathe", 1), false},
		{auto, "Sure. " + one, true},
		{auto, "plain text, no call <tool_ <tool_cal", false}, // the alt needs "<!" or a call
		{auto, "plain text <!", true},
		{auto, "text <tool_call> in text <!", false},
		{auto, "text " + noop + "\n" + one, true},
	} {
		if got := acceptBytes(c.g, c.doc); got != c.want {
			t.Errorf("%q: accepted %v, want %v", c.doc, got, c.want)
		}
		if c.want && !acceptDoc(t, e, c.g, c.doc) {
			t.Errorf("%q: the bytes pass but its tokens do not", c.doc)
		}
	}
}

func TestComposeFreeText(t *testing.T) {
	e := env(t, "llama3")
	for _, c := range []struct {
		ft   FreeText
		doc  string
		want bool
	}{
		{FreeText{Without: "</think>"}, "let me think </thin> k", true},
		{FreeText{Without: "</think>"}, "a</think>", false},
		{FreeText{Without: "aab"}, "aaab", false},
		{FreeText{Without: "aab"}, "ababaa", true},
		{FreeText{Without: "é€"}, "ééé€", false},
		{FreeText{Without: "é€"}, "é é€x", false},
		{FreeText{Without: "é€"}, "€é", true},
		{FreeText{NotFirst: "{["}, "{\"a\": 1}", false},
		{FreeText{NotFirst: "{["}, " {\"a\": 1}", true},
		{FreeText{NotFirst: "{", Without: "ab"}, "", true},
		{FreeText{NotFirst: "{", Without: "ab"}, "xa{b", true},
		{FreeText{NotFirst: "{", Without: "ab"}, "xab", false},
		{FreeText{MaxChars: 3}, "é€x", true},
		{FreeText{MaxChars: 3}, "é€xy", false},
		{FreeText{MaxChars: 4, Without: "</t>"}, "a</t", true},
		{FreeText{MaxChars: 4, Without: "</t>"}, "</t>", false},
		{FreeText{MaxChars: 2, NotFirst: "{"}, "{", false},
		{FreeText{MaxChars: 2, NotFirst: "{"}, "a{", true},
	} {
		g := composeGrammar(t, e.comp, Part{Text: &c.ft})
		if got := acceptBytes(g, c.doc); got != c.want {
			t.Errorf("%+v %q: accepted %v, want %v", c.ft, c.doc, got, c.want)
		}
	}
}

// TestComposeRepeatBounds: a bounded repeat takes min..max items, separated.
func TestComposeRepeatBounds(t *testing.T) {
	e := env(t, "llama3")
	g := composeGrammar(t, e.comp, Part{Repeat: &Repeat{Part: Literal("x"), Sep: &Part{Lit: ","}, Min: 1, Max: 3}})
	for doc, want := range map[string]bool{"": false, "x": true, "x,x": true, "x,x,x": true, "x,x,x,x": false, "xx": false, "x,": false} {
		if got := acceptBytes(g, doc); got != want {
			t.Errorf("%q: accepted %v, want %v", doc, got, want)
		}
	}
	g = composeGrammar(t, e.comp, Part{Repeat: &Repeat{Part: Literal("x"), Sep: &Part{Lit: ","}, Min: 0, Max: -1}})
	for doc, want := range map[string]bool{"": true, "x": true, "x,x,x,x": true, "xx": false, ",x": false} {
		if got := acceptBytes(g, doc); got != want {
			t.Errorf("unbounded %q: accepted %v, want %v", doc, got, want)
		}
	}
	for _, bad := range []string{`{}`, `{"lit":"a","text":{}}`, `{"alt":[]}`, `{"repeat":{"part":{"lit":"x"},"min":3,"max":2}}`, `{"schema":{"type":"nope"}}`, `not json`} {
		if _, err := e.comp.Compose(bad); err == nil {
			t.Errorf("%s compiled", bad)
		}
	}
}

// TestComposeRandomWalks samples random token paths through a required tool-call grammar: every
// path that reaches EOS spells calls whose arguments validate against their schema.
func TestComposeRandomWalks(t *testing.T) {
	e := env(t, "qwen3")
	schema := `{"type":"object","properties":{"q":{"type":"string","maxLength":6},"n":{"type":"integer","minimum":0,"maximum":99},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["q"],"additionalProperties":false}`
	g := composeGrammar(t, e.comp, Part{Repeat: &Repeat{Part: toolCallPart("search", schema), Sep: &Part{Lit: "\n"}, Min: 1, Max: 2}})
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	rng := rand.New(rand.NewPCG(1, 2))
	finished := 0
	for walk := 0; walk < 20; walk++ {
		m := g.NewMatcher()
		var out []byte
		ended := false
		for step := 0; step < 200 && !ended; step++ {
			m.FillMask(mask)
			var allowed []int32
			for id := 0; id < e.tok.VocabSize(); id++ {
				if mask[id>>6]&(1<<(uint(id)&63)) != 0 {
					allowed = append(allowed, int32(id))
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("walk %d: dead end after %q", walk, out)
			}
			id := allowed[rng.IntN(len(allowed))]
			if id == e.eos {
				ended = true
			} else {
				out = append(out, e.tok.TokenBytes(id)...)
			}
			if !m.Accept(id) {
				t.Fatalf("walk %d: masked token %d refused", walk, id)
			}
		}
		if !ended {
			continue
		}
		finished++
		for _, call := range strings.Split(string(out), "\n<tool_call>") {
			call = strings.TrimPrefix(call, "<tool_call>")
			body := strings.TrimSuffix(strings.TrimPrefix(call, "\n"), "\n</tool_call>")
			var v struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil || v.Name != "search" {
				t.Fatalf("walk %d: call %q does not parse: %v", walk, body, err)
			}
			if err := validateInstance(schema, v.Arguments); err != nil {
				t.Fatalf("walk %d: arguments %s: %v", walk, v.Arguments, err)
			}
		}
	}
	if finished < 10 {
		t.Errorf("only %d of 20 walks reached EOS", finished)
	}
}

// validateInstance checks doc against schema with jsonschema/v6, apart from grammar's own code.
func validateInstance(schema string, doc []byte) error {
	c := jsonschema.NewCompiler()
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return err
	}
	if err := c.AddResource("s.json", s); err != nil {
		return err
	}
	sch, err := c.Compile("s.json")
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(doc)))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// TestComposeGBNF: a GBNF grammar inside a composition (after a reasoning block) keeps its own
// rules and language, and its errors keep their line and column.
func TestComposeGBNF(t *testing.T) {
	e := env(t, "llama3")
	arith := "root ::= expr\nexpr ::= num ((\"+\" | \"*\") num)*\nnum ::= [0-9]+\n"
	g := composeGrammar(t, e.comp, Sequence(Literal("<think>"), TextUntil("</think>"), Literal("</think>"), Part{GBNF: arith}))
	for _, c := range []struct {
		doc  string
		want bool
	}{
		{"<think>hmm</think>1+2*3", true},
		{"<think></think>42", true},
		{"<think>x</think>1+", false},
		{"<think>x</think>", false},
		{"1+2", false},
	} {
		if got := acceptBytes(g, c.doc); got != c.want {
			t.Errorf("%q: accepted %v, want %v", c.doc, got, c.want)
		}
	}
	spec, err := ComposeSpec(Sequence(Literal("a"), Part{GBNF: "root ::= \"x\"\nbad ::= (\"y\"\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.comp.Compose(spec.Text); err == nil || !strings.Contains(err.Error(), "line 2 column") {
		t.Errorf("malformed GBNF in a composition: %v, want an error naming line 2 and a column", err)
	}
}
