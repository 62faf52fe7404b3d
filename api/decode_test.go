package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/metrics"
)

// parseTokenIDs agrees with encoding/json on every array of non-negative int32s and refuses
// everything else.
func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, ` [ 0 , 2147483647 ] `, `[2147483648]`, `[-1]`, `[1.5]`, `[1e3]`,
		`[01]`, `[1,]`, `[,1]`, `["1"]`, `[1 2]`, `[1]x`, `{}`, `[`, `[null]`, `[true]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseTokenIDs(data, "p", 1<<20)
		var want []int32
		jerr := json.Unmarshal(data, &want)
		if jerr == nil && want != nil && !slices.ContainsFunc(want, func(id int32) bool { return id < 0 }) &&
			!strings.ContainsAny(string(data), ".eE") && !strings.Contains(string(data), "null") {
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("%q: got %v, %v; encoding/json says %v", data, got, err, want)
			}
			return
		}
		if err == nil && jerr != nil {
			t.Fatalf("%q accepted as %v; encoding/json: %v", data, got, jerr)
		}
	})
}

// The count is checked as ids are read: one past the limit is refused without reading on.
func TestParseTokenIDsStopsAtLimit(t *testing.T) {
	data := "[" + strings.Repeat("7,", 10) + "not json at all"
	_, err := parseTokenIDs([]byte(data), "input_ids", 10)
	if err == nil || !strings.Contains(err.Error(), "more than 10") {
		t.Fatalf("err %v, want more than 10", err)
	}
	if ids, err := parseTokenIDs([]byte("[1,2,3]"), "input_ids", 3); err != nil || len(ids) != 3 {
		t.Fatalf("at the limit: %v %v", ids, err)
	}
}

func TestCheckKeysExact(t *testing.T) {
	typ := reflect.TypeFor[*generateRequest]()
	for _, c := range []struct {
		body string
		bad  string // the field named in the error; "" for accepted
	}{
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":3}}`, ""},
		{`{"Input_IDs":[1]}`, "Input_IDs"},
		{`{"input_ids":[1],"sampling_params":{"Max_New_Tokens":3}}`, "sampling_params.Max_New_Tokens"},
		{`{"input_ids":[1],"extra":1}`, "extra"},
	} {
		err := checkKeys([]byte(c.body), typ, "")
		if c.bad == "" {
			if err != nil {
				t.Errorf("%s: %v", c.body, err)
			}
			continue
		}
		var bre *BadRequestError
		if !errorsAs(err, &bre) || bre.Param != c.bad {
			t.Errorf("%s: %v, want a 400 naming %s", c.body, err, c.bad)
		}
	}
	chat := reflect.TypeFor[*chatRequest]()
	if err := checkKeys([]byte(`{"messages":[],"response_format":{"type":"json_schema","json_schema":{"Schema":{}}}}`), chat, ""); err == nil {
		t.Error("response_format.json_schema.Schema accepted")
	}
	if err := checkKeys([]byte(`{"messages":[{"Role":"user"}],"chat_template_kwargs":{"X":1}}`), chat, ""); err != nil {
		t.Errorf("free-form objects are not checked: %v", err)
	}
}

func errorsAs(err error, bre **BadRequestError) bool {
	b, ok := err.(*BadRequestError)
	*bre = b
	return ok
}

// Every numeric boundary the engine cannot honour exactly is a 400 naming the field, never a
// clamp, a wrap or a 5xx.
func TestNumericBoundaries(t *testing.T) {
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{1}, Finished: true, FinishReason: FinishLength, CompletionTokens: 1})
	}}
	ts := newTestServer(t, e, 1)
	for _, c := range []struct{ path, body, param string }{
		{"/v1/completions", `{"prompt":[1],"max_tokens":9223372036854775807}`, "max_tokens"},
		{"/v1/completions", `{"prompt":[1],"max_tokens":9223372036854775808}`, "max_tokens"},
		{"/v1/completions", `{"prompt":[1],"top_k":2147483648}`, "top_k"},
		{"/v1/completions", `{"prompt":[1],"top_k":4294967297}`, "top_k"},
		{"/v1/completions", `{"prompt":[1],"min_tokens":4294967296}`, "min_tokens"},
		{"/v1/completions", `{"prompt":[1],"min_tokens":17}`, "min_tokens"},
		{"/v1/completions", `{"prompt":[1],"stream_interval":4294967297}`, "stream_interval"},
		{"/v1/completions", `{"prompt":[1],"temperature":3.4e38}`, "temperature"},
		{"/v1/completions", `{"prompt":[1],"temperature":1e39}`, "temperature"},
		{"/v1/completions", `{"prompt":[1],"top_p":-3.5e38}`, "top_p"},
		{"/v1/completions", `{"prompt":[1],"seed":-1}`, "seed"},
		{"/v1/completions", `{"prompt":[1],"stop_token_ids":[-5]}`, "stop_token_ids"},
		{"/v1/completions", `{"prompt":[1],"routed_dp_rank":4294967296}`, "routed_dp_rank"},
		{"/v1/completions", `{"prompt":[1],"best_of":0}`, "best_of"},
		{"/v1/completions", `{"prompt":[2147483648]}`, "prompt"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"max_new_tokens":9223372036854775807}}`, "max_new_tokens"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"min_new_tokens":4294967296,"max_new_tokens":5}}`, "min_tokens"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"top_k":2147483648}}`, "top_k"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"stream_interval":4294967297}}`, "stream_interval"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"temperature":3.5e38}}`, "temperature"},
		{"/generate", `{"input_ids":[1],"sampling_params":{"Temperature":0.5}}`, "sampling_params.Temperature"},
		{"/generate", `{"Input_ids":[1]}`, "Input_ids"},
		{"/generate", `{"input_ids":[1],"rid":"` + strings.Repeat("r", maxRIDBytes+1) + `"}`, "rid"},
	} {
		resp, err := http.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal(b, &out)
		if resp.StatusCode != http.StatusBadRequest || out.Error.Param != c.param {
			t.Errorf("%s %s: status %d param %q (%s), want 400 naming %q", c.path, clip(c.body), resp.StatusCode, out.Error.Param, clip(string(b)), c.param)
		}
		if len(b) > 2*maxMessageBytes {
			t.Errorf("%s: error body of %d bytes echoes the input", c.path, len(b))
		}
	}
	// The largest values that fit are accepted as sent.
	resp, err := http.Post(ts.URL+"/generate", "application/json", strings.NewReader(
		`{"input_ids":[1],"sampling_params":{"max_new_tokens":16,"min_new_tokens":16,"top_k":2147483647,"stream_interval":2147483647,"temperature":8.5e37,"seed":9223372036854775807}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("largest values: status %d %s", resp.StatusCode, b)
	}
	req := e.lastRequest()
	if resp.StatusCode != 200 || req.Sampling.TopK != 2147483647 || req.StreamInterval != 2147483647 || req.MinNewTokens != 16 ||
		req.Sampling.Temperature != float32(8.5e37) || *req.Sampling.Seed != 9223372036854775807 {
		t.Fatalf("status %d, request %+v", resp.StatusCode, req)
	}
}

// A body over the limit is refused from its Content-Length, before it is read; error bodies
// quote at most a bounded part of the input.
func TestBodyLimits(t *testing.T) {
	e := &feedEngine{feed: func(st *Stream, req *Request) {}}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 8, StreamInterval: 1, SkipTokenizerInit: true, MaxBodyBytes: 1 << 20},
		e, testRegistry(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	r, w := io.Pipe()
	defer w.Close()
	go func() { _, _ = w.Write([]byte(`{"input_ids":[`)) }() // then nothing: the rest never comes
	req, _ := http.NewRequest("POST", "/generate", r)
	req.ContentLength = 50 << 20
	rec := newRecorder()
	h.ServeHTTP(rec, req)
	if rec.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("50 MB body: status %d %s", rec.status, rec.body.String())
	}
	long := fmt.Sprintf(`{"input_ids":[%s1]}`, strings.Repeat("1,", 8))
	req, _ = http.NewRequest("POST", "/generate", strings.NewReader(long))
	rec = newRecorder()
	h.ServeHTTP(rec, req)
	if rec.status != http.StatusBadRequest || !strings.Contains(rec.body.String(), "more than 7 token ids") {
		t.Fatalf("9 ids, context 8: status %d %s", rec.status, rec.body.String())
	}
	huge := `{"input_ids":[1],"` + strings.Repeat("k", 1<<19) + `":1}`
	req, _ = http.NewRequest("POST", "/generate", strings.NewReader(huge))
	rec = newRecorder()
	h.ServeHTTP(rec, req)
	if rec.status != http.StatusBadRequest || rec.body.Len() > 2*maxMessageBytes {
		t.Fatalf("huge key: status %d, %d bytes of error", rec.status, rec.body.Len())
	}
}

func testRegistry() *metrics.Registry { return metrics.NewRegistry() }

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// recorder is a minimal http.ResponseWriter that keeps the status and body.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{h: http.Header{}, status: 200} }

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(s int)           { r.status = s }

// OpenPaths decides which paths need no key; keys compare exactly.
func TestAuthOpenPaths(t *testing.T) {
	e := &feedEngine{feed: func(st *Stream, req *Request) {}}
	for _, c := range []struct {
		open       []string
		health, mt int
	}{
		{nil, 200, 200},
		{[]string{}, 401, 401},
		{[]string{"/metrics"}, 401, 200},
	} {
		srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 8, StreamInterval: 1, SkipTokenizerInit: true,
			APIKeys: []string{"k1"}, OpenPaths: c.open}, e, testRegistry(), discardLog())
		if err != nil {
			t.Fatal(err)
		}
		h := srv.Handler()
		get := func(path, auth string) int {
			req, _ := http.NewRequest("GET", path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			rec := newRecorder()
			h.ServeHTTP(rec, req)
			return rec.status
		}
		if got := get("/health", ""); got != c.health {
			t.Errorf("open %v: /health %d, want %d", c.open, got, c.health)
		}
		if got := get("/metrics", ""); got != c.mt {
			t.Errorf("open %v: /metrics %d, want %d", c.open, got, c.mt)
		}
		if got := get("/v1/models", "Bearer k1"); got != 200 {
			t.Errorf("open %v: /v1/models with the key: %d", c.open, got)
		}
		if got := get("/v1/models", "Bearer k10"); got != 401 {
			t.Errorf("open %v: /v1/models with a longer key: %d", c.open, got)
		}
		// The scheme's name is case-insensitive (RFC 9110, 11.1); another scheme is not Bearer.
		for _, auth := range []string{"bearer k1", "BEARER k1", "Bearer  k1"} {
			if got := get("/v1/models", auth); got != 200 {
				t.Errorf("open %v: /v1/models with %q: %d", c.open, auth, got)
			}
		}
		for _, auth := range []string{"Basic k1", "Bearerk1", "k1", "Bearer"} {
			if got := get("/v1/models", auth); got != 401 {
				t.Errorf("open %v: /v1/models with %q: %d", c.open, auth, got)
			}
		}
		// Anthropic's clients send the key as x-api-key; an Authorization header, when present,
		// is the one that counts.
		apiKey := func(key, auth string) int {
			req, _ := http.NewRequest("POST", "/v1/messages/count_tokens", strings.NewReader("{"))
			req.Header.Set("X-Api-Key", key)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			rec := newRecorder()
			h.ServeHTTP(rec, req)
			return rec.status
		}
		if got := apiKey("k1", ""); got == 401 {
			t.Errorf("open %v: x-api-key with the key: 401", c.open)
		}
		for _, k := range [][2]string{{"k10", ""}, {"", ""}, {"k1", "Bearer k2"}} {
			if got := apiKey(k[0], k[1]); got != 401 {
				t.Errorf("open %v: x-api-key %q, Authorization %q: %d, want 401", c.open, k[0], k[1], got)
			}
		}
	}
	if _, err := NewServer(Config{ServedModelName: "m", ContextLength: 8, StreamInterval: 1, APIKeys: []string{"a b"}}, e, testRegistry(), discardLog()); err == nil {
		t.Error("a key with a space was accepted")
	}
}

// A value of the wrong JSON type is refused naming the field and the type it expects, in JSON's
// words, not Go's.
func TestJSONTypeErrorsNameFieldAndType(t *testing.T) {
	type msg struct {
		Content string `json:"content"`
	}
	type body struct {
		Messages []map[string]any `json:"messages"`
		Items    []msg            `json:"items"`
		N        *int             `json:"n"`
		T        float64          `json:"temperature"`
		S        bool             `json:"stream"`
	}
	for in, want := range map[string]string{
		`{"messages":"hi"}`:         "messages: expected an array of objects, got a string",
		`{"items":[{"content":3}]}`: "items.content: expected a string, got a number",
		`{"n":"2"}`:                 "n: expected an integer, got a string",
		`{"n":2.5}`:                 "expected an integer, got number 2.5",
		`{"temperature":"hot"}`:     "temperature: expected a number, got a string",
		`{"stream":"yes"}`:          "stream: expected a boolean (true or false), got a string",
		`{"messages":[}`:            "invalid JSON body at byte",
		`{"messages":[`:             "ends before the value is complete",
	} {
		var b body
		err := jsonError(json.Unmarshal([]byte(in), &b))
		if in == `{"messages":[` {
			err = jsonError(json.NewDecoder(strings.NewReader(in)).Decode(&b))
		}
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "interface") {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
		if field, _, ok := strings.Cut(err.Error(), ": "); ok && strings.Count(err.Error(), field+": ") > 1 {
			t.Errorf("%s: %v names the field twice", in, err)
		}
	}
}
