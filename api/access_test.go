package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// logBuffer collects JSON log lines from the server's handler goroutines.
type logBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// waitLine returns the first access line whose request_id is id, waiting for the handler to
// return (a client can read a whole response before its handler logs).
func (b *logBuffer) waitLine(t *testing.T, id string) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b.mu.Lock()
		sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
		b.mu.Unlock()
		for sc.Scan() {
			var line map[string]any
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			if line["msg"] == "request" && line["request_id"] == id {
				return line
			}
		}
	}
	t.Fatalf("no access line for request id %q", id)
	return nil
}

// submitted counts the requests submitted so far.
func (e *feedEngine) submitted() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.subs)
}

// rank2Engine runs its requests on rank 2.
type rank2Engine struct{ *tokEngine }

func (e rank2Engine) Submit(ctx context.Context, req *Request) (*Stream, error) {
	st, err := e.tokEngine.Submit(ctx, req)
	if st != nil {
		st.Rank = 2
	}
	return st, err
}

// TestAccessLine: each request gets one access line at info with its method, endpoint, status,
// usage, TTFT, duration, rank and request id; the id is the client's X-Request-Id when valid
// (echoed, and carried on the engine request) or a fresh one; a malformed id is a 400 naming
// the header; probes log at debug only.
func TestAccessLine(t *testing.T) {
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(3)}, tok: tok}
	var logs logBuffer
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, DefaultSampling: sampling.DefaultParams()},
		rank2Engine{e}, metrics.NewRegistry(), slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	do := func(path, id, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
		if path == "/metrics" {
			req.Method, req.Body = "GET", nil
		}
		if id != "" {
			req.Header.Set(requestIDHeader, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sink bytes.Buffer
		_, _ = sink.ReadFrom(resp.Body)
		resp.Body.Close()
		return resp
	}

	for _, stream := range []string{"false", "true"} {
		id := "trace-42/" + stream
		resp := do("/v1/completions", id, `{"prompt":"hi there","max_tokens":3,"stream":`+stream+`}`)
		if resp.StatusCode != 200 || resp.Header.Get(requestIDHeader) != id {
			t.Fatalf("stream %s: status %d, %s %q", stream, resp.StatusCode, requestIDHeader, resp.Header.Get(requestIDHeader))
		}
		if got := e.lastRequest().RequestID; got != id {
			t.Errorf("the engine's request carries id %q, want %q", got, id)
		}
		line := logs.waitLine(t, id)
		prompt := float64(len(e.lastRequest().InputIDs))
		if line["level"] != "INFO" || line["method"] != "POST" || line["endpoint"] != "/v1/completions" || line["status"] != 200.0 ||
			line["prompt_tokens"] != prompt || line["completion_tokens"] != 3.0 || line["rank"] != 2.0 {
			t.Errorf("stream %s: access line %v", stream, line)
		}
		ttft, _ := line["ttft"].(float64)
		dur, _ := line["duration"].(float64)
		if ttft <= 0 || dur < ttft {
			t.Errorf("stream %s: ttft %v, duration %v (nanoseconds)", stream, line["ttft"], line["duration"])
		}
	}

	// No id: one is made, returned, and logged; a refused request is logged too.
	resp := do("/v1/completions", "", `{"prompt":"hi","max_tokens":-1}`)
	made := resp.Header.Get(requestIDHeader)
	if resp.StatusCode != 400 || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(made) {
		t.Fatalf("status %d, made id %q", resp.StatusCode, made)
	}
	if line := logs.waitLine(t, made); line["status"] != 400.0 || line["prompt_tokens"] != nil {
		t.Errorf("refused request's line %v", line)
	}

	// Malformed ids: a 400 naming the header, under a fresh id.
	for _, bad := range []string{"has space", "tab\tid", strings.Repeat("x", maxRequestIDLen+1), "ünïcode"} {
		n := e.submitted()
		resp := do("/v1/completions", bad, `{"prompt":"hi","max_tokens":1}`)
		if resp.StatusCode != 400 || resp.Header.Get(requestIDHeader) == bad || e.submitted() != n {
			t.Errorf("id %q: status %d, header %q, %d submitted", bad, resp.StatusCode, resp.Header.Get(requestIDHeader), e.submitted()-n)
		}
	}
	if id := strings.Repeat("y", maxRequestIDLen); do("/v1/completions", id, `{"prompt":"hi","max_tokens":1}`).StatusCode != 200 {
		t.Errorf("an id of %d characters was refused", maxRequestIDLen)
	}

	// The dispatch and prefix-cache series count the two generation requests and the 128-id one.
	var text bytes.Buffer
	srv.reg.WriteText(&text)
	scrape := text.String()
	for _, want := range []string{`llm_request_preprocess_seconds_count{model_name="m"} 3`, `vllm:prefix_cache_hits_total{model_name="m"} 0`} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// A scrape is a probe: no line at info.
	do("/metrics", "scrape-1", "")
	time.Sleep(50 * time.Millisecond)
	logs.mu.Lock()
	scraped := strings.Contains(logs.buf.String(), "scrape-1")
	logs.mu.Unlock()
	if scraped {
		t.Error("a /metrics scrape was logged at info")
	}
}

// TestStreamCountsMergedOutputs: outputs pushed while earlier ones wait untaken are merged (and
// counted); once taken, the next push starts a fresh chunk.
func TestStreamCountsMergedOutputs(t *testing.T) {
	st := NewStream("r")
	for i := range 3 {
		st.Push(&Delta{IDs: []int32{int32(i)}, CompletionTokens: i + 1})
	}
	d, err := st.Next(context.Background(), 1)
	if err != nil || len(d.IDs) != 3 || st.Merged() != 2 {
		t.Fatalf("took %v (%v), merged %d; want 3 ids, 2 merged", d.IDs, err, st.Merged())
	}
	st.Push(&Delta{IDs: []int32{9}, CompletionTokens: 4, Finished: true, FinishReason: FinishLength})
	if d, _ := st.Next(context.Background(), 1); len(d.IDs) != 1 || st.Merged() != 2 {
		t.Fatalf("took %v, merged %d; want 1 id, still 2 merged", d.IDs, st.Merged())
	}
}
