package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// picoTokenizer is the committed pico model's tokenizer, loaded once.
var picoTokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) { return tokenizer.Load("../models/pico") })

// tokEngine is feedEngine with a real tokenizer and a configurable rank table.
type tokEngine struct {
	feedEngine
	tok   *tokenizer.Tokenizer
	ranks []shard.RankLoad
}

func (e *tokEngine) Tokenizer() *tokenizer.Tokenizer { return e.tok }
func (e *tokEngine) Load() LoadReport {
	return LoadReport{Dispatch: shard.Snapshot{Ranks: e.ranks}}
}

// finishAfter pushes n tokens (ids 1..n) and a length finish.
func finishAfter(n int) func(st *Stream, req *Request) {
	return func(st *Stream, req *Request) {
		for i := range n {
			st.Push(&Delta{IDs: []int32{int32(i + 1)}, Text: tokenText(i + 1), PromptTokens: len(req.InputIDs), CompletionTokens: i + 1})
		}
		st.Push(&Delta{Finished: true, FinishReason: FinishLength, PromptTokens: len(req.InputIDs), CompletionTokens: n})
	}
}

func newTokServer(t *testing.T, e *tokEngine, strict bool) *httptest.Server {
	t.Helper()
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e.tok = tok
	return serveEngine(t, e, strict)
}

// serveEngine serves e on a test server with the settings the tests share.
func serveEngine(t *testing.T, e Engine, strict bool) *httptest.Server {
	t.Helper()
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1,
		DefaultSampling: sampling.DefaultParams(), GrammarStrict: strict},
		e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, ts *httptest.Server, path, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestIgnoredFieldsAreNamed: fields that change nothing are accepted and named in the header;
// a field that would change generation and is unknown stays a 400 naming it.
func TestIgnoredFieldsAreNamed(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(2)}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,
		"request_id":"abc","priority":3,"prompt_cache_key":"k","user":"u","metadata":{"a":"b"},"store":false,
		"safety_identifier":"s","service_tier":null,"spaces_between_special_tokens":true,
		"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	want := "user,metadata,store,request_id,priority,prompt_cache_key,safety_identifier,spaces_between_special_tokens,stream_options.include_obfuscation"
	if got := resp.Header.Get(IgnoredFieldsHeader); got != want {
		t.Fatalf("ignored header %q, want %q", got, want)
	}
	resp, _ = post(t, ts, "/v1/completions", `{"prompt":"hi","max_tokens":2,"spaces_between_special_tokens":false}`)
	if resp.StatusCode != 200 || resp.Header.Get(IgnoredFieldsHeader) != "" {
		t.Fatalf("status %d, ignored %q: nothing was ignored", resp.StatusCode, resp.Header.Get(IgnoredFieldsHeader))
	}
	for _, field := range []string{"guided_decoding_backend"} {
		resp, body = post(t, ts, "/v1/completions", `{"prompt":"hi","`+field+`":"x"}`)
		if resp.StatusCode != 400 || !strings.Contains(body, field) {
			t.Fatalf("%s: status %d %s, want a 400 naming it", field, resp.StatusCode, body)
		}
	}
	resp, body = post(t, ts, "/v1/completions", `{"prompt":"hi","structured_outputs":{"structural_tag":"x"}}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "structural_tag") {
		t.Fatalf("structured_outputs.structural_tag: status %d %s, want a 400 naming it", resp.StatusCode, body)
	}
}

// TestStructuredOutputAliases: vLLM's and SGLang's fields become the same constraint as
// response_format; two at once are refused, naming both.
func TestStructuredOutputAliases(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	schema := `{"type":"object","properties":{"a":{"type":"integer"}}}`
	for _, c := range []struct {
		fields string
		kind   GrammarKind
		spec   string
	}{
		{`"guided_json":` + schema, GrammarJSONSchema, schema},
		{`"guided_json":` + mustJSON(schema), GrammarJSONSchema, schema},
		{`"json_schema":` + mustJSON(schema), GrammarJSONSchema, schema},
		{`"guided_regex":"[0-9]+"`, GrammarRegex, "[0-9]+"},
		{`"regex":"[0-9]+"`, GrammarRegex, "[0-9]+"},
		{`"structured_outputs":{"json":` + schema + `}`, GrammarJSONSchema, schema},
		{`"structured_outputs":{"regex":"a|b"}`, GrammarRegex, "a|b"},
		{`"structured_outputs":{"json_object":true}`, GrammarJSONObject, ""},
		{`"guided_choice":["yes","no"]`, GrammarRegex, "(yes|no)"},
		{`"structured_outputs":{"choice":["a.b","c"]}`, GrammarRegex, `(a\.b|c)`},
		{`"guided_grammar":"root ::= \"x\""`, GrammarGBNF, `root ::= "x"`},
		{`"structured_outputs":{"grammar":"root ::= [0-9]+"}`, GrammarGBNF, "root ::= [0-9]+"},
		{`"ebnf":"root ::= \"a\" | \"b\""`, GrammarGBNF, `root ::= "a" | "b"`},
	} {
		resp, body := post(t, ts, "/v1/completions", `{"prompt":"hi","max_tokens":1,`+c.fields+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d %s", c.fields, resp.StatusCode, body)
		}
		req := e.lastRequest()
		if req.GrammarKind != c.kind || req.GrammarSpec != c.spec {
			t.Fatalf("%s: got kind %d spec %q, want %d %q", c.fields, req.GrammarKind, req.GrammarSpec, c.kind, c.spec)
		}
	}
	resp, body := post(t, ts, "/v1/completions", `{"prompt":"hi","guided_regex":"a","response_format":{"type":"json_object"}}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "response_format, guided_regex") {
		t.Fatalf("two constraints: status %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts, "/v1/completions", `{"prompt":"hi","guided_choice":[]}`)
	if resp.StatusCode != 400 || !strings.Contains(body, "guided_choice") {
		t.Fatalf("empty guided_choice: status %d %s", resp.StatusCode, body)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestChoiceRegexMatchesExactlyTheChoices checks the alternation against Go's RE2 engine and the
// grammar compiler's own regex engine, with choices full of metacharacters.
func TestChoiceRegexMatchesExactlyTheChoices(t *testing.T) {
	choices := []string{"a.b", "(x|y)*", `back\slash`, "tab\there", "naïve [set]", "$^+?{2}", ""}
	re := choiceRegex(choices)
	rx := regexp.MustCompile(`^` + re + `$`)
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.NewCompiler(tok, nil, grammar.Options{}).Regex(re)
	if err != nil {
		t.Fatalf("grammar compile %q: %v", re, err)
	}
	for _, c := range choices {
		if !rx.MatchString(c) {
			t.Errorf("RE2: %q does not match %q", re, c)
		}
		if m := g.NewMatcher(); !m.AcceptBytes([]byte(c)) || !m.CanEnd() {
			t.Errorf("grammar: %q does not match %q", re, c)
		}
	}
	for _, other := range []string{"axb", "x", "xy", `backsslash`, "naïve s", "a.bb"} {
		if rx.MatchString(other) {
			t.Errorf("RE2: %q matches %q", re, other)
		}
		if m := g.NewMatcher(); m.AcceptBytes([]byte(other)) && m.CanEnd() {
			t.Errorf("grammar: %q matches %q", re, other)
		}
	}
}

// TestPerRequestStrict: a request's json_schema.strict that differs from the server's setting
// rewrites the schema so the compiled grammar behaves as asked; checked with an independent JSON
// Schema validator and with the grammar compiler in its server setting.
func TestPerRequestStrict(t *testing.T) {
	schema := `{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"object","properties":{"x":{"type":"string"}}},
		"t":{"type":"array","prefixItems":[{"type":"integer"}]}},"required":["b","a","t"],
		"$defs":{"o":{"properties":{"y":{}},"required":["z"]}}}`
	doc := `{"b":1,"a":{"x":"s"},"t":[1]}`
	loose := []string{`{"b":1,"a":{"x":"s","extra":1},"t":[1]}`, `{"b":1,"a":{"x":"s"},"t":[1,2]}`, `{"b":1,"a":{"x":"s"},"t":[1],"c":2}`}
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	for _, strict := range []bool{true, false} {
		out, err := rewriteStrict([]byte(schema), strict)
		if err != nil {
			t.Fatal(err)
		}
		// Property order is kept: generation writes properties in schema order.
		if i, j := strings.Index(string(out), `"b"`), strings.Index(string(out), `"a"`); i < 0 || i > j {
			t.Fatalf("strict=%v: property order changed: %s", strict, out)
		}
		// enum values are data, not schemas: never rewritten.
		enum := `{"enum":[{"properties":{"k":1}},{"b":1,"a":{},"t":[]}]}`
		if got, err := rewriteStrict([]byte(enum), strict); err != nil || string(got) != enum {
			t.Fatalf("strict=%v: enum rewritten: %s %v", strict, got, err)
		}
		// A required name outside properties keeps the object open.
		if strings.Contains(string(out), `"required":["z"],"additionalProperties"`) {
			t.Fatalf("strict=%v: closed an object that requires an unlisted name: %s", strict, out)
		}
		var parsed any
		if err := json.Unmarshal(out, &parsed); err != nil {
			t.Fatalf("strict=%v: rewritten schema is not JSON: %v\n%s", strict, err, out)
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("s.json", parsed); err != nil {
			t.Fatal(err)
		}
		sch, err := c.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		// The compiler runs in the opposite setting (the request's strict differs from it).
		g, err := grammar.NewCompiler(tok, nil, grammar.Options{Strict: !strict}).JSONSchema(string(out))
		if err != nil {
			t.Fatalf("strict=%v: grammar compile: %v\n%s", strict, err, out)
		}
		for _, d := range append([]string{doc}, loose...) {
			var v any
			_ = json.Unmarshal([]byte(d), &v)
			valid := sch.Validate(v) == nil
			m := g.NewMatcher()
			generated := m.AcceptBytes([]byte(d)) && m.CanEnd()
			want := d == doc || !strict
			if valid != want || generated != want {
				t.Errorf("strict=%v %s: validator %v, grammar %v, want %v", strict, d, valid, generated, want)
			}
		}
	}
}

// TestPerRequestStrictReachesTheEngine: the rewritten schema is what is dispatched, and only
// when the request's strict differs from the server's.
func TestPerRequestStrictReachesTheEngine(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	schema := `{"type":"object","properties":{"a":{"type":"integer"}}}`
	for _, c := range []struct {
		strict string
		spec   string
	}{
		{"true", schema},
		{"null", schema},
		{"false", `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true}`},
	} {
		resp, body := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,
			"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":`+c.strict+`,"schema":`+schema+`}}}`)
		if resp.StatusCode != 200 {
			t.Fatalf("strict %s: status %d %s", c.strict, resp.StatusCode, body)
		}
		if got := e.lastRequest().GrammarSpec; got != c.spec {
			t.Fatalf("strict %s: dispatched %s, want %s", c.strict, got, c.spec)
		}
	}
}

// TestContinuousUsageStats: every chunk carries the usage so far, and the counts grow by the
// chunk's tokens.
func TestContinuousUsageStats(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: func(st *Stream, req *Request) {
		for i := range 5 {
			time.Sleep(10 * time.Millisecond) // a step apart: separate chunks
			st.Push(&Delta{IDs: []int32{int32(i + 1)}, PromptTokens: 3, CompletionTokens: i + 1})
		}
		st.Push(&Delta{Finished: true, FinishReason: FinishLength, PromptTokens: 3, CompletionTokens: 5})
	}}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":5,"stream":true,"return_token_ids":true,
		"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	total, chunks, final := 0, 0, 0
	for data := range sseData(body) {
		var c struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Total      int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage == nil {
			t.Fatalf("chunk without usage: %s", data)
		}
		if len(c.Choices) == 0 {
			final = c.Usage.Completion
			continue
		}
		chunks++
		total += len(c.Choices[0].TokenIDs)
		if c.Usage.Completion != total || c.Usage.Prompt != 3 || c.Usage.Total != 3+total {
			t.Fatalf("chunk %d: usage %+v after %d tokens", chunks, *c.Usage, total)
		}
	}
	if total != 5 || final != 5 || chunks < 2 {
		t.Fatalf("tokens %d, final usage %d, chunks %d", total, final, chunks)
	}
}

// TestInfoRoutes: /v1/models/{id}, /version, /detokenize in both shapes, JSON 404 and 405.
func TestInfoRoutes(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("%s: not JSON: %v", path, err)
		}
		return resp.StatusCode, v
	}
	if code, v := get("/v1/models/m"); code != 200 || v["id"] != "m" || v["object"] != "model" {
		t.Fatalf("/v1/models/m: %d %v", code, v)
	}
	for _, path := range []string{"/v1/models/other", "/v1/models/org/m", "/no/such/route"} {
		code, v := get(path)
		errObj, _ := v["error"].(map[string]any)
		if code != 404 || errObj == nil || errObj["type"] != "not_found_error" || errObj["message"] == "" {
			t.Fatalf("%s: %d %v, want an OpenAI-shaped 404", path, code, v)
		}
	}
	if code, v := get("/v1/completions"); code != 405 || v["error"] == nil {
		t.Fatalf("GET /v1/completions: %d %v, want a JSON 405", code, v)
	}
	if code, v := get("/version"); code != 200 || v["version"] == "" {
		t.Fatalf("/version: %d %v", code, v)
	}
	tok := e.tok
	ids := tok.Encode("hello world", true)
	resp, body := post(t, ts, "/detokenize", `{"tokens":`+mustJSON(ids)+`}`)
	var out map[string]string
	_ = json.Unmarshal([]byte(body), &out)
	want := tok.Decode(ids, true)
	if resp.StatusCode != 200 || out["text"] != want || out["prompt"] != want {
		t.Fatalf("/detokenize: %d %v, want text and prompt %q", resp.StatusCode, out, want)
	}
	resp, body = post(t, ts, "/detokenize", `{"tokens":`+mustJSON(ids)+`,"skip_special_tokens":false}`)
	_ = json.Unmarshal([]byte(body), &out)
	if want := tok.Decode(ids, false); resp.StatusCode != 200 || out["prompt"] != want {
		t.Fatalf("/detokenize keeping specials: %v, want %q", out, want)
	}
}

// TestHealthGenerate runs one token on every rank, pinned to it, and names a failing rank.
func TestHealthGenerate(t *testing.T) {
	var failRank = -1
	var mu sync.Mutex
	e := &tokEngine{ranks: []shard.RankLoad{{Rank: 0}, {Rank: 1}, {Rank: 2}}}
	e.feed = func(st *Stream, req *Request) {
		mu.Lock()
		fail := req.RoutedRank == failRank
		mu.Unlock()
		if fail {
			st.Push(&Delta{Finished: true, FinishReason: FinishError, Err: context.DeadlineExceeded})
			return
		}
		finishAfter(req.MaxNewTokens)(st, req)
	}
	ts := newTokServer(t, e, true)
	resp, err := http.Get(ts.URL + "/health_generate")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status string      `json:"status"`
		Ranks  []rankProbe `json:"ranks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != 200 || v.Status != "ok" || len(v.Ranks) != 3 {
		t.Fatalf("status %d %+v", resp.StatusCode, v)
	}
	pinned := map[int]bool{}
	for _, r := range e.subs {
		if r.MaxNewTokens != 1 {
			t.Fatalf("probe asked for %d tokens", r.MaxNewTokens)
		}
		pinned[r.RoutedRank] = true
	}
	if len(pinned) != 3 {
		t.Fatalf("probes pinned to %v, want ranks 0, 1, 2", pinned)
	}
	mu.Lock()
	failRank = 1
	mu.Unlock()
	resp2, body := func() (*http.Response, string) {
		r, err := http.Get(ts.URL + "/health_generate")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return r, string(b)
	}()
	if resp2.StatusCode != 503 || !strings.Contains(body, "rank 1") || strings.Contains(body, "rank 0") {
		t.Fatalf("failing rank: %d %s", resp2.StatusCode, body)
	}
}
