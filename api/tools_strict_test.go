package api

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// TestFunctionStrictClosesArguments: on a permissive server (--grammar-strict=false) a function
// with "strict": true gets closed arguments (no undeclared key), as OpenAI's strict function
// calling promises; without it, or with "strict": false, the server's permissive setting holds.
// Before, the field was read and ignored.
func TestFunctionStrictClosesArguments(t *testing.T) {
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &gbnfEngine{tokEngine: tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}, tok: tok}}
	comp := grammar.NewCompiler(tok, nil, grammar.Options{Strict: false})
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1,
		DefaultSampling: sampling.DefaultParams(), GrammarStrict: false}, e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	syn, ok := syntaxOf(srv.toolSyntax())
	if !ok {
		t.Fatalf("pico's tool syntax %q is not constrained", srv.toolSyntax())
	}
	call := func(args string) string { return syn.open + syn.head + "get_weather" + syn.mid + args + syn.close }
	for _, c := range []struct {
		strict     string
		openAccept bool // whether an undeclared key is accepted
	}{{``, true}, {`,"strict":false`, true}, {`,"strict":true`, false}} {
		body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"tool_choice":"required","parallel_tool_calls":false,` +
			`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}` + c.strict + `}}]}`
		resp, b := post(t, ts, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.strict, resp.StatusCode, b)
		}
		req := e.lastRequest()
		if req.GrammarKind != GrammarCompose {
			t.Fatalf("%s: grammar kind %v", c.strict, req.GrammarKind)
		}
		g, err := comp.Compose(req.GrammarSpec)
		if err != nil {
			t.Fatal(err)
		}
		accepts := func(doc string) bool { m := g.NewMatcher(); return m.AcceptBytes([]byte(doc)) && m.CanEnd() }
		if !accepts(call(`{"city":"Oslo"}`)) {
			t.Fatalf("%s: a valid call %q is refused", c.strict, call(`{"city":"Oslo"}`))
		}
		if got := accepts(call(`{"city":"Oslo","extra":1}`)); got != c.openAccept {
			t.Errorf("function%s on a permissive server: an undeclared key accepted %v, want %v", c.strict, got, c.openAccept)
		}
	}
}
