package bareserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

func newTestServer(t *testing.T, interval time.Duration) (*Server, *httptest.Server) {
	t.Helper()
	seq, err := tokseq.Parse("prompt:1,100")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: "bare", Sequence: seq, TokenInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// events splits an SSE body into its data payloads, checking every event is one data line.
func events(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("body does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		p, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(p, "\n") {
			t.Fatalf("event is not one data line: %q", ev)
		}
		out = append(out, p)
	}
	return out
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         *string `json:"text"`
		Delta        *struct{ Role, Content string }
		TokenIDs     []int32 `json:"token_ids"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func TestCompletionStreamShape(t *testing.T) {
	s, ts := newTestServer(t, 0)
	code, body := post(t, ts.URL+"/v1/completions",
		`{"model":"bare","prompt":[5,6,98],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true,"stream_interval":2}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	evs := events(t, body)
	// Interval 2: first token alone, then 2, then the last 2; usage; [DONE].
	if len(evs) != 5 || evs[4] != "[DONE]" {
		t.Fatalf("events = %q", evs)
	}
	var ids []int32
	var text string
	for i, ev := range evs[:3] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %d: %v: %s", i, err, ev)
		}
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Choices[0].Text == nil {
			t.Fatalf("chunk %d shape: %s", i, ev)
		}
		ids = append(ids, c.Choices[0].TokenIDs...)
		text += *c.Choices[0].Text
		fin := c.Choices[0].FinishReason
		if (i == 2) != (fin != nil) || (fin != nil && *fin != "length") {
			t.Fatalf("chunk %d finish_reason: %s", i, ev)
		}
	}
	want := []int32{99, 0, 1, 2, 3} // key 98, step 1, mod 100
	if len(ids) != len(want) {
		t.Fatalf("ids = %v, want %v", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("ids = %v, want %v", ids, want)
		}
	}
	if text != " t99 t0 t1 t2 t3" {
		t.Fatalf("text = %q", text)
	}
	var u chunk
	if err := json.Unmarshal([]byte(evs[3]), &u); err != nil || u.Usage == nil || len(u.Choices) != 0 {
		t.Fatalf("usage chunk %s: %v", evs[3], err)
	}
	if u.Usage.PromptTokens != 3 || u.Usage.CompletionTokens != 5 || u.Usage.TotalTokens != 8 {
		t.Fatalf("usage = %+v", *u.Usage)
	}
	if s.Active() != 0 || s.Served() != 1 {
		t.Fatalf("active %d served %d", s.Active(), s.Served())
	}
}

func TestChatStreamShape(t *testing.T) {
	_, ts := newTestServer(t, time.Millisecond)
	code, body := post(t, ts.URL+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"hi there"}],"max_tokens":3,"stream":true,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	evs := events(t, body)
	if len(evs) != 4 || evs[3] != "[DONE]" { // 3 tokens, no usage asked, [DONE]
		t.Fatalf("events = %q", evs)
	}
	for i, ev := range evs[:3] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if c.Object != "chat.completion.chunk" || c.Choices[0].Delta == nil || len(c.Choices[0].TokenIDs) != 1 {
			t.Fatalf("chunk %d shape: %s", i, ev)
		}
		if (i == 0) != (c.Choices[0].Delta.Role == "assistant") {
			t.Fatalf("chunk %d role: %s", i, ev)
		}
		if c.Choices[0].TokenIDs[0] != int32(i+1) { // text prompt: key 0
			t.Fatalf("chunk %d id: %s", i, ev)
		}
	}
}

func TestWholeResponse(t *testing.T) {
	_, ts := newTestServer(t, 0)
	code, body := post(t, ts.URL+"/v1/completions", `{"prompt":"a b c d","max_tokens":2,"return_token_ids":true}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var c chunk
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	if *c.Choices[0].Text != " t1 t2" || len(c.Choices[0].TokenIDs) != 2 || c.Usage.PromptTokens != 4 || c.Usage.CompletionTokens != 2 {
		t.Fatalf("response %s", body)
	}
}

func TestRejectsBadRequests(t *testing.T) {
	_, ts := newTestServer(t, 0)
	for _, body := range []string{
		`{"prompt":[1],"max_tokens":0,"stream":true}`,
		`{"prompt":[1],"max_tokens":4,"stream_interval":0,"stream":true}`,
		`{"prompt":[],"max_tokens":4}`,
		`{"prompt":7,"max_tokens":4}`,
		`{"max_tokens":4}`,
		`not json`,
	} {
		code, resp := post(t, ts.URL+"/v1/completions", body)
		if code != http.StatusBadRequest || !strings.Contains(resp, `"error"`) {
			t.Errorf("%s: status %d body %s", body, code, resp)
		}
	}
	if code, resp := post(t, ts.URL+"/v1/chat/completions", `{"messages":[]}`); code != http.StatusBadRequest {
		t.Errorf("empty messages: status %d body %s", code, resp)
	}
}

func TestModelsAndLoad(t *testing.T) {
	_, ts := newTestServer(t, 0)
	for path, want := range map[string]string{
		"/v1/models": `"id":"bare"`,
		"/get_load":  `"totals":{"running":0,"waiting":0`,
	} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !json.Valid(b) || !strings.Contains(string(b), want) {
			t.Errorf("%s = %s, want it to contain %s", path, b, want)
		}
	}
}

// BenchmarkStream measures the server's cost per chunk through a real loopback connection.
func BenchmarkStream(b *testing.B) {
	seq, _ := tokseq.Parse("prompt:1,8192")
	s, _ := New(Config{Model: "bare", Sequence: seq})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	const tokens = 1024
	body := `{"prompt":[1,2,3],"max_tokens":1024,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true}`
	b.ResetTimer()
	for b.Loop() {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/chunk")
}
