package api

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// TestResponseFormatAfterThinkingSharesOneCompileDeadline: with thinking on, response_format is
// compiled twice (the schema alone, then the composition after the reasoning block); both
// compiles draw on the request's one deadline. Before, each had a fresh budget, so a request
// could spend twice its compile budget of a worker's CPU; here two compiles of 200 ms under a
// 300 ms budget must end in a 400 naming the budget, and every check saw the same deadline.
func TestResponseFormatAfterThinkingSharesOneCompileDeadline(t *testing.T) {
	defer func(b time.Duration) { requestCompileBudget = b }(requestCompileBudget)
	requestCompileBudget = 300 * time.Millisecond
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &budgetEngine{gbnfEngine: gbnfEngine{tokEngine: tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}, tok: tok}}, cost: 200 * time.Millisecond}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, ReasoningParser: ReasoningQwen3,
		DefaultSampling: sampling.DefaultParams()}, e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	for _, rf := range []string{
		`{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`,
		`{"type":"structural_tag","structures":[{"begin":"<a>","schema":{"type":"object"},"end":"</a>"}],"triggers":["<a>"]}`,
	} {
		e.mu.Lock()
		e.by = nil
		e.mu.Unlock()
		body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"response_format":` + rf + `}`
		start := time.Now()
		resp, b := post(t, ts, "/v1/chat/completions", body)
		took := time.Since(start)
		t.Logf("%d after %v: %s", resp.StatusCode, took, b)
		if resp.StatusCode != 400 || !strings.Contains(b, "compile budget") {
			t.Fatalf("status %d %s, want a 400 naming the compile budget", resp.StatusCode, b)
		}
		if took > 2*requestCompileBudget {
			t.Errorf("took %v for a %v budget", took, requestCompileBudget)
		}
		e.mu.Lock()
		if len(e.by) != 2 || !e.by[0].Equal(e.by[1]) {
			t.Errorf("the request's checks had deadlines %v, want two equal ones", e.by)
		}
		e.mu.Unlock()
	}
}
