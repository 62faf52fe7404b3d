package api

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// slowCheckEngine spends cost on each grammar check, as a large grammar's parse does, and
// refuses the grammars that say "bad".
type slowCheckEngine struct {
	*gbnfEngine
	cost time.Duration
}

func (e *slowCheckEngine) CheckGrammar(kind GrammarKind, spec string) error {
	time.Sleep(e.cost)
	if strings.Contains(spec, "bad") {
		return errors.New("grammar: too costly")
	}
	return nil
}

// TestRefusedGrammarAnswerWaits: the 400 refusing a grammar is answered refusalPauseFactor
// times what the request took later, so a client sending costly bombs back to back waits most
// of the time instead of keeping a core busy; an accepted grammar is not held. Before, the
// refusal came at once, and a loop of 700 KB bombs took a core from the model's forward.
func TestRefusedGrammarAnswerWaits(t *testing.T) {
	g, _ := newGBNFServer(t)
	e := &slowCheckEngine{gbnfEngine: g, cost: 40 * time.Millisecond}
	ts := serveEngine(t, e, true)
	body := func(g string) string {
		return `{"text":"hi","sampling_params":{"max_new_tokens":1,"grammar":` + mustJSON(g) + `}}`
	}
	start := time.Now()
	resp, out := post(t, ts, "/generate", body(`root ::= "bad"`))
	refused := time.Since(start)
	if resp.StatusCode != 400 || !strings.Contains(out, "too costly") {
		t.Fatalf("refused grammar: %d %s", resp.StatusCode, out)
	}
	if want := 4 * e.cost; refused < want { // the check, then 3x what it took
		t.Errorf("refused grammar answered after %v, want at least %v (its %v check, then 3x that)", refused, want, e.cost)
	}
	start = time.Now()
	if resp, out := post(t, ts, "/generate", body(`root ::= "good"`)); resp.StatusCode != 200 {
		t.Fatalf("accepted grammar: %d %s", resp.StatusCode, out)
	}
	t.Logf("refused after %v, accepted after %v (checks of %v each)", refused, time.Since(start), e.cost)
}

// busyCheckEngine has no compile slot for any grammar.
type busyCheckEngine struct{ *gbnfEngine }

func (e *busyCheckEngine) CheckGrammar(GrammarKind, string) error {
	return fmt.Errorf("no grammar compile slot free: %w", ErrOverloaded)
}

// TestGrammarCheckOverloadedIs503: a grammar check that found no compile slot in time is the
// engine's overload, a 503 with Retry-After, not a refusal of the client's grammar (a 400).
func TestGrammarCheckOverloadedIs503(t *testing.T) {
	g, _ := newGBNFServer(t)
	ts := serveEngine(t, &busyCheckEngine{g}, true)
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"text":"hi","sampling_params":{"max_new_tokens":1,"grammar":"root ::= \"a\""}}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"response_format":{"type":"json_object"}}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`},
	} {
		resp, out := post(t, ts, c.path, c.body)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(out, "compile slot") {
			t.Errorf("%s %s: %d %s, want a 503 naming the compile slot", c.path, c.body, resp.StatusCode, out)
		}
	}
}
