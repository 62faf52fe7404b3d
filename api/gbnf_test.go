package api

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/grammar"
)

// gbnfEngine checks GBNF constraints with the real grammar compiler, so a malformed grammar
// is refused the way the worker refuses it.
type gbnfEngine struct {
	tokEngine
	comp *grammar.Compiler // built on the pico tokenizer by newGBNFServer
}

func (e *gbnfEngine) CheckGrammar(kind GrammarKind, spec string) error {
	if kind != GrammarGBNF {
		return nil
	}
	_, err := e.comp.GBNF(spec)
	return err
}

func newGBNFServer(t *testing.T) (*gbnfEngine, *httptest.Server) {
	t.Helper()
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &gbnfEngine{tokEngine: tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}, tok: tok}}
	e.comp = grammar.NewCompiler(tok, nil, grammar.Options{})
	return e, serveEngine(t, e, true)
}

// TestGBNFFields: every field that carries a GBNF grammar (/generate's grammar and ebnf, the
// OpenAI endpoints' guided_grammar, structured_outputs.grammar and ebnf) becomes the same
// constraint; two constraints at once are a 400 naming both; a malformed grammar is a 400
// naming the field, the line and the column.
func TestGBNFFields(t *testing.T) {
	e, ts := newGBNFServer(t)
	const g = `root ::= [0-9]+ ("+" [0-9]+)*`
	q := mustJSON(g)
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1,"grammar":` + q + `}}`},
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1,"ebnf":` + q + `}}`},
		{"/v1/completions", `{"prompt":"hi","max_tokens":1,"guided_grammar":` + q + `}`},
		{"/v1/completions", `{"prompt":"hi","max_tokens":1,"ebnf":` + q + `}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"structured_outputs":{"grammar":` + q + `}}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"guided_grammar":` + q + `}`},
	} {
		resp, body := post(t, ts, c.path, c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d %s", c.path, c.body, resp.StatusCode, body)
		}
		if req := e.lastRequest(); req.GrammarKind != GrammarGBNF || req.GrammarSpec != g {
			t.Fatalf("%s %s: kind %d spec %q, want GBNF %q", c.path, c.body, req.GrammarKind, req.GrammarSpec, g)
		}
	}
	for _, c := range []struct{ path, body, names string }{
		{"/generate", `{"text":"hi","sampling_params":{"grammar":` + q + `,"ebnf":` + q + `}}`, "ebnf, grammar"},
		{"/generate", `{"text":"hi","sampling_params":{"regex":"a","grammar":` + q + `}}`, "regex, grammar"},
		{"/v1/completions", `{"prompt":"hi","guided_grammar":` + q + `,"guided_regex":"a"}`, "guided_regex, guided_grammar"},
		{"/v1/completions", `{"prompt":"hi","structured_outputs":{"grammar":` + q + `},"response_format":{"type":"json_object"}}`, "response_format, structured_outputs.grammar"},
	} {
		resp, body := post(t, ts, c.path, c.body)
		if resp.StatusCode != 400 || !strings.Contains(body, c.names) {
			t.Errorf("%s %s: status %d %s, want a 400 naming %s", c.path, c.body, resp.StatusCode, body, c.names)
		}
	}
	bad := mustJSON("root ::= num\nnum ::= [0-9+\n")
	for _, c := range []struct{ path, body, field string }{
		{"/generate", `{"text":"hi","sampling_params":{"grammar":` + bad + `}}`, "grammar"},
		{"/generate", `{"text":"hi","sampling_params":{"ebnf":` + bad + `}}`, "ebnf"},
		{"/v1/completions", `{"prompt":"hi","guided_grammar":` + bad + `}`, "guided_grammar"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"structured_outputs":{"grammar":` + bad + `}}`, "structured_outputs.grammar"},
	} {
		resp, body := post(t, ts, c.path, c.body)
		if resp.StatusCode != 400 || !strings.Contains(body, c.field) || !strings.Contains(body, "line 2 column") {
			t.Errorf("%s %s: status %d %s, want a 400 naming %s, line 2 and a column", c.path, c.body, resp.StatusCode, body, c.field)
		}
	}
	// "grammar" is /generate's name only: on the OpenAI endpoints it is an unknown field.
	resp, body := post(t, ts, "/v1/completions", `{"prompt":"hi","grammar":`+q+`}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "grammar") {
		t.Errorf("grammar on /v1/completions: status %d %s, want a 400 naming it", resp.StatusCode, body)
	}
}
