package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/tokenizer"
)

// Every JSON field of every request body, sent alone on top of a minimal body, must do one of
// three things: change what the server builds from the body (the engine Request and the response
// format for the generation endpoints, the answer for /tokenize and /detokenize), be refused with
// an error naming it, or be named in X-LLMServe-Ignored-Fields. The fields are listed by
// reflection over the body types, and the body types by parsing this package, so a field or a
// body added without anything that applies it fails here.

// fieldCase is how one field is exercised: value (JSON) is set at the field's path in ctx (a
// whole body; "" = the endpoint's base), and the result is compared with ctx's own.
type fieldCase struct {
	value string
	ctx   string
}

// fieldEndpoint is one request body type and how to observe what the server makes of it.
type fieldEndpoint struct {
	path string
	body reflect.Type
	base string
	// cases hold the values (and contexts) of the fields that the defaults by kind do not
	// exercise: a value the field needs to mean something, or a sibling it works with.
	cases map[string]fieldCase
}

// fieldOutcome is what the server made of one body.
type fieldOutcome struct {
	status  int
	param   string // the error's param, for a refusal
	ignored []string
	built   any // what the server built (compared with reflect.DeepEqual)
}

// ridEngine is tokEngine with request ids that restart at every build, so two builds of one
// body are equal.
type ridEngine struct {
	tokEngine
	next int
}

func (e *ridEngine) NewRID() string { e.next++; return "rid" + strconv.Itoa(e.next) }

// builtPair is what a generation endpoint builds from a body: the engine request, the response
// format, and the whole response the format writes for one fixed output (what it echoes of the
// body: /v1/responses keeps the body itself, which is left out of the comparison).
type builtPair struct {
	Req    *Request
	Format outputFormat
	Whole  string
}

// snapshot is what capture keeps of one build.
func snapshot(req *Request, f outputFormat) builtPair {
	req.compileBy = time.Time{} // the compile deadline differs on every build
	p := builtPair{Req: req, Format: f}
	if _, ok := f.(*choiceSet); !ok {
		p.Whole = string(f.whole(nil, &Delta{IDs: []int32{9707}, Text: "Hello", Finished: true, FinishReason: FinishStop,
			PromptTokens: len(req.InputIDs), CompletionTokens: 1}))
	}
	if rf, ok := f.(*responsesFormat); ok {
		rf.body = nil
	}
	return p
}

// capture wraps a build function: it builds the body once more with a fixed start and request
// ids counted from zero, and keeps that build for comparison (the one served is built apart,
// since serving changes a format's state).
func capture[B any](e *ridEngine, got *any, build func(*B, time.Time) (*Request, outputFormat, error)) func(*B, time.Time) (*Request, outputFormat, error) {
	start := time.Unix(1_700_000_000, 0)
	return func(b *B, _ time.Time) (*Request, outputFormat, error) {
		e.next = 0
		copyB := *b
		req, f, err := build(&copyB, start)
		if err != nil {
			return nil, nil, err
		}
		*got = snapshot(req, f)
		e.next = 1000
		return build(b, start)
	}
}

// llama3BOS loads Llama 3's tokenizer with add_bos_token set, as Meta's own files add
// <|begin_of_text|> (the fixture's post-processor does not), so add_special_tokens shows.
func llama3BOS(t *testing.T) *tokenizer.Tokenizer {
	dir := t.TempDir()
	src := "../testdata/tokenizer-files/llama3/"
	data, err := os.ReadFile(src + "tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	data, err = os.ReadFile(src + "tokenizer_config.json")
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg["add_bos_token"] = true
	data, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fieldServer serves the endpoints with tok, each generation endpoint's build captured; run
// posts one body and says what the server made of it.
func fieldServer(t *testing.T, tok *tokenizer.Tokenizer) func(path, body string) fieldOutcome {
	e := &ridEngine{tokEngine: tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}, tok: tok}}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1,
		DefaultSampling: sampling.DefaultParams(), GrammarStrict: true, Embeddings: EmbeddingConfig{Size: 64, Matryoshka: true}},
		e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var built any
	routes := map[string]http.Handler{
		"/v1/completions":      generation(srv, "/v1/completions", capture(e, &built, srv.buildCompletion)),
		"/v1/chat/completions": generation(srv, "/v1/chat/completions", capture(e, &built, srv.buildChat)),
		"/generate":            generation(srv, "/generate", capture(e, &built, srv.buildGenerate)),
		"/v1/responses":        generation(srv, "/v1/responses", capture(e, &built, srv.buildResponses)),
		"/v1/messages":         generation(srv, "/v1/messages", capture(e, &built, srv.buildMessages)),
		"/tokenize":            http.HandlerFunc(srv.handleTokenize),
		"/detokenize":          http.HandlerFunc(srv.handleDetokenize),
		// What /v1/embeddings builds from a body: its validated inputs and output settings (the
		// vectors come from a rank, which this engine does not run).
		"/v1/embeddings": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body embeddingRequest
			if err := srv.decodeBody(w, r, &body); err != nil {
				srv.fail(w, err)
				return
			}
			p, err := srv.buildEmbeddings(&body)
			if err != nil {
				srv.fail(w, err)
				return
			}
			srv.reportIgnored(w, "/v1/embeddings", &body)
			built = p
		}),
	}
	return func(path, body string) fieldOutcome {
		built = nil
		w := httptest.NewRecorder()
		routes[path].ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		out := fieldOutcome{status: w.Code, built: built}
		if path == "/tokenize" || path == "/detokenize" {
			out.built = w.Body.String()
		}
		if h := w.Header().Get(IgnoredFieldsHeader); h != "" {
			out.ignored = strings.Split(h, ",")
		}
		if w.Code != http.StatusOK {
			var eb struct {
				Error apiError `json:"error"`
			}
			_ = json.Unmarshal(w.Body.Bytes(), &eb)
			out.param = eb.Error.Param
			out.built = w.Body.String()
		}
		return out
	}
}

// TestEveryRequestFieldDoesSomething: see the top of this file. The generation endpoints run on
// Qwen3's tokenizer (chat template with tools and thinking), /tokenize and /detokenize on
// Llama 3's.
func TestEveryRequestFieldDoesSomething(t *testing.T) {
	qwen3, err := qwen3Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	onQwen3, onLlama3 := fieldServer(t, qwen3), fieldServer(t, llama3BOS(t))
	run := func(path, body string) fieldOutcome {
		if path == "/tokenize" || path == "/detokenize" {
			return onLlama3(path, body)
		}
		return onQwen3(path, body)
	}

	tools := `[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}]`
	flatTools := `[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}]`
	schema := `{"type":"object"}`
	rfSchema := `{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`
	prompt := `"the quick brown fox jumps over the lazy dog"`
	stTag := `{"type":"structural_tag","structures":[{"begin":"<a>","schema":{"type":"object"},"end":"</a>"}],"triggers":["<"]}`
	// The sampling block's fields, spelled alike on both OpenAI endpoints.
	openAI := func(base string, extra map[string]fieldCase) map[string]fieldCase {
		with := func(k, v string) string { return strings.TrimSuffix(base, "}") + `,"` + k + `":` + v + "}" }
		m := map[string]fieldCase{
			"skip_special_tokens":                     {value: "false"},
			"stop":                                    {value: `"x"`},
			"json_schema":                             {value: strconv.Quote(schema)},
			"stop_token_ids":                          {value: "[5]"},
			"logit_bias":                              {value: `{"5":10}`},
			"guided_json":                             {value: schema},
			"guided_choice":                           {value: `["a","b"]`},
			"structured_outputs.json":                 {value: schema},
			"structured_outputs.choice":               {value: `["a","b"]`},
			"response_format.type":                    {value: `"json_object"`},
			"response_format.json_schema.schema":      {value: schema, ctx: with("response_format", `{"type":"json_schema","json_schema":{"schema":{"type":"string"}}}`)},
			"response_format.json_schema.strict":      {value: "false", ctx: with("response_format", rfSchema)},
			"response_format.json_schema.name":        {value: `"x"`, ctx: with("response_format", rfSchema)},
			"response_format.json_schema.description": {value: `"x"`, ctx: with("response_format", rfSchema)},
			"response_format.structures":              {value: `[{"begin":"<b>","schema":{"type":"object"},"end":"</b>"}]`, ctx: with("response_format", stTag)},
			"response_format.triggers":                {value: `["<","["]`, ctx: with("response_format", stTag)},
			"response_format.format":                  {value: `{"type":"const_string","value":"b"}`, ctx: with("response_format", `{"type":"structural_tag","format":{"type":"const_string","value":"a"}}`)},
			"truncate_prompt_tokens":                  {value: "1"},
			"stream_options.include_usage":            {value: "true", ctx: with("stream", "true")},
			"stream_options.continuous_usage_stats":   {value: "true", ctx: with("stream", "true")},
			"stream_options.include_obfuscation":      {value: "false", ctx: with("stream", "true")},
			"model":                                   {value: `"another"`},
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	chatBase := `{"messages":[{"role":"user","content":"hello there"}]}`
	chatWith := func(k, v string) string { return strings.TrimSuffix(chatBase, "}") + `,"` + k + `":` + v + "}" }
	msgBase := `{"max_tokens":5,"messages":[{"role":"user","content":"hello there"}]}`
	msgWith := func(k, v string) string { return strings.TrimSuffix(msgBase, "}") + `,"` + k + `":` + v + "}" }
	msgTools := `[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}]`
	respBase := `{"input":"hello there"}`
	respWith := func(k, v string) string { return strings.TrimSuffix(respBase, "}") + `,"` + k + `":` + v + "}" }
	endpoints := []fieldEndpoint{
		{path: "/v1/completions", body: reflect.TypeFor[completionRequest](), base: `{"prompt":` + prompt + `}`,
			cases: openAI(`{"prompt":`+prompt+`}`, map[string]fieldCase{
				"prompt": {value: `"hello"`},
			})},
		{path: "/v1/chat/completions", body: reflect.TypeFor[chatRequest](), base: chatBase,
			cases: openAI(chatBase, map[string]fieldCase{
				"messages":             {value: `[{"role":"user","content":"bye"}]`},
				"top_logprobs":         {value: "3", ctx: chatWith("logprobs", "true")},
				"tools":                {value: tools},
				"tool_choice":          {value: `"required"`, ctx: chatWith("tools", tools)},
				"parallel_tool_calls":  {value: "false", ctx: chatWith("tools", tools)},
				"chat_template_kwargs": {value: `{"enable_thinking":false}`},
				"reasoning_effort":     {value: `"low"`},
			})},
		{path: "/generate", body: reflect.TypeFor[generateRequest](), base: `{"text":` + prompt + `}`,
			cases: map[string]fieldCase{
				"text":                                {value: `"hello"`},
				"input_ids":                           {value: "[1,2,3]", ctx: `{"input_ids":[1,2]}`},
				"top_logprobs_num":                    {value: "3", ctx: `{"text":` + prompt + `,"return_logprob":true}`},
				"logprob_start_len":                   {value: "1", ctx: `{"text":` + prompt + `,"return_logprob":true}`},
				"sampling_params.skip_special_tokens": {value: "false"},
				"sampling_params.stop":                {value: `"x"`},
				"sampling_params.stop_token_ids":      {value: "[5]"},
				"sampling_params.logit_bias":          {value: `{"5":10}`},
			}},
		{path: "/v1/responses", body: reflect.TypeFor[responsesRequest](), base: respBase,
			cases: map[string]fieldCase{
				"input":                                 {value: `"bye"`},
				"text.format.type":                      {value: `"json_object"`},
				"text.format.schema":                    {value: schema, ctx: respWith("text", `{"format":{"type":"json_schema","schema":{"type":"string"}}}`)},
				"text.format.strict":                    {value: "false", ctx: respWith("text", `{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`)},
				"text.format.name":                      {value: `"x"`, ctx: respWith("text", `{"format":{"type":"json_schema","schema":{"type":"object"}}}`)},
				"text.format.description":               {value: `"x"`, ctx: respWith("text", `{"format":{"type":"json_schema","schema":{"type":"object"}}}`)},
				"tools":                                 {value: flatTools},
				"tool_choice":                           {value: `"required"`, ctx: respWith("tools", flatTools)},
				"parallel_tool_calls":                   {value: "false", ctx: respWith("tools", flatTools)},
				"include":                               {value: `["x"]`},
				"model":                                 {value: `"another"`},
				"stream_options.include_usage":          {value: "true", ctx: respWith("stream", "true")},
				"stream_options.continuous_usage_stats": {value: "true", ctx: respWith("stream", "true")},
				"stream_options.include_obfuscation":    {value: "false", ctx: respWith("stream", "true")},
			}},
		{path: "/v1/messages", body: reflect.TypeFor[messagesRequest](), base: msgBase,
			cases: map[string]fieldCase{
				"messages":             {value: `[{"role":"user","content":"bye"}]`},
				"system":               {value: `"Be brief."`},
				"stop_sequences":       {value: `["x"]`},
				"tools":                {value: msgTools},
				"tool_choice":          {value: `{"type":"any"}`, ctx: msgWith("tools", msgTools)},
				"thinking":             {value: `{"type":"enabled"}`},
				"max_reasoning_chars":  {value: "3", ctx: msgWith("thinking", `{"type":"enabled"}`)},
				"chat_template_kwargs": {value: `{"enable_thinking":true}`},
				"model":                {value: `"another"`},
			}},
		{path: "/v1/embeddings", body: reflect.TypeFor[embeddingRequest](), base: `{"input":"hello"}`,
			cases: map[string]fieldCase{
				"input":           {value: `"bye"`},
				"dimensions":      {value: "8"},
				"encoding_format": {value: `"base64"`},
				"model":           {value: `"another"`},
			}},
		{path: "/tokenize", body: reflect.TypeFor[tokenizeRequest](), base: `{"text":"hello"}`,
			cases: map[string]fieldCase{
				"prompt":               {value: `"bye"`, ctx: `{"prompt":"hello"}`},
				"messages":             {value: `[{"role":"user","content":"bye"}]`},
				"tools":                {value: tools, ctx: `{"messages":[{"role":"user","content":"hi"}]}`},
				"chat_template_kwargs": {value: `{"bos_token":"<|end_of_text|>"}`, ctx: `{"messages":[{"role":"user","content":"hi"}]}`},
				"add_special_tokens":   {value: "false"},
				"model":                {value: `"another"`},
			}},
		{path: "/detokenize", body: reflect.TypeFor[detokenizeRequest](), base: `{"tokens":[128000,9906]}`,
			cases: map[string]fieldCase{
				"tokens":              {value: "[1917]"},
				"skip_special_tokens": {value: "false"},
				"model":               {value: `"another"`},
			}},
	}

	covered := map[string]bool{}
	for _, ep := range endpoints {
		covered[ep.body.Name()] = true
		seen := map[string]bool{}
		for _, f := range bodyLeaves(ep.body, "") {
			seen[f.path] = true
			c, ok := ep.cases[f.path]
			if !ok {
				c = fieldCase{value: defaultValue(t, ep.path, f)}
			}
			ctx := c.ctx
			if ctx == "" {
				ctx = ep.base
			}
			body := setJSONPath(t, ctx, f.path, c.value)
			before, after := run(ep.path, normalJSON(t, ctx)), run(ep.path, body)
			if before.status != http.StatusOK {
				t.Errorf("%s %s: the context %s is refused (%d %v)", ep.path, f.path, ctx, before.status, before.built)
				continue
			}
			named := slices.Contains(after.ignored, f.path)
			switch {
			case after.status >= 400 && after.status < 500 && (after.param == f.path || f.path == "model" && after.status == http.StatusNotFound):
				// refused, naming it
			case after.status != http.StatusOK:
				t.Errorf("%s %s = %s: status %d naming %q (%v), want 200 or a 4xx naming the field", ep.path, f.path, c.value, after.status, after.param, after.built)
			case named && !reflect.DeepEqual(before.built, after.built):
				t.Errorf("%s %s = %s is named ignored but changes the request", ep.path, f.path, c.value)
			case named:
			case reflect.DeepEqual(before.built, after.built):
				t.Errorf("%s %s = %s changes nothing, is not refused and is not named in %s", ep.path, f.path, c.value, IgnoredFieldsHeader)
			}
		}
		for path := range ep.cases {
			if !seen[path] {
				t.Errorf("%s: the case for %s names no field of %s", ep.path, path, ep.body)
			}
		}
	}
	for _, name := range requestBodyTypes(t) {
		if !covered[name] {
			t.Errorf("request body type %s has no endpoint in this test", name)
		}
	}
}

// jsonField is one leaf of a request body: its JSON path and Go type.
type jsonField struct {
	path string
	typ  reflect.Type
}

// bodyLeaves lists the JSON leaves of a body type as the decoder sees them (jsonFields, which
// checkKeys uses too), sorted: pointers followed, objects descended into (json.RawMessage and
// maps are leaves).
func bodyLeaves(typ reflect.Type, prefix string) []jsonField {
	var out []jsonField
	for name, ft := range jsonFields(typ) {
		et := ft
		for et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		if et.Kind() == reflect.Struct {
			out = append(out, bodyLeaves(et, prefix+name+".")...)
			continue
		}
		out = append(out, jsonField{prefix + name, ft})
	}
	slices.SortFunc(out, func(a, b jsonField) int { return strings.Compare(a.path, b.path) })
	return out
}

// defaultValue is a value of f's type that differs from what an absent field means, for the
// fields no case names.
func defaultValue(t *testing.T, endpoint string, f jsonField) string {
	typ := f.typ
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == reflect.TypeFor[json.RawMessage]() {
		return `"x"`
	}
	switch typ.Kind() {
	case reflect.Bool:
		return "true"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "3"
	case reflect.Float32, reflect.Float64:
		return "0.5"
	case reflect.String:
		return `"x"`
	case reflect.Slice:
		if typ.Elem().Kind() == reflect.String {
			return `["x"]`
		}
	}
	t.Fatalf("%s %s (%v): no default value: add a case", endpoint, f.path, f.typ)
	return ""
}

// normalJSON is body as setJSONPath writes it (object keys sorted), so a context and the body
// made from it differ only in the field set.
func normalJSON(t *testing.T, body string) string {
	var v any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// setJSONPath sets the dotted path of the JSON object body to value.
func setJSONPath(t *testing.T, body, path, value string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("%s: %v", value, err)
	}
	keys := strings.Split(path, ".")
	cur := m
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	cur[keys[len(keys)-1]] = v
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// requestBodyTypes lists the struct types of this package named *Request whose fields carry
// JSON tags: the bodies the endpoints decode.
func requestBodyTypes(t *testing.T) []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !strings.HasSuffix(ts.Name.Name, "Request") {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, f := range st.Fields.List {
				if f.Tag != nil && strings.Contains(f.Tag.Value, "json:") {
					out = append(out, ts.Name.Name)
					break
				}
			}
			return true
		})
	}
	return out
}
