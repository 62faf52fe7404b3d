package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// /tokenize and /detokenize answer a body over the limit with a 413, as the generation endpoints
// do, not a 400.
func TestTokenizerEndpointsBodyLimit(t *testing.T) {
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, MaxBodyBytes: 64,
		DefaultSampling: sampling.DefaultParams()},
		&tokEngine{tok: tok}, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, c := range []struct{ path, body string }{
		{"/tokenize", `{"text":"` + strings.Repeat("a", 100) + `"}`},
		{"/detokenize", `{"tokens":[` + strings.Repeat("1,", 50) + `1]}`},
		{"/v1/completions", `{"prompt":"` + strings.Repeat("a", 100) + `"}`},
	} {
		resp, body := post(t, ts, c.path, c.body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: status %d (%s), want 413", c.path, resp.StatusCode, body)
		}
	}
}
