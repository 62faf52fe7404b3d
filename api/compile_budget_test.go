package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// budgetEngine simulates grammar compiles that each take cost of work, stopping at the deadline
// they are given, and records the deadlines.
type budgetEngine struct {
	gbnfEngine
	cost time.Duration
	mu   sync.Mutex  // guards the fields below
	by   []time.Time // the deadline of each check
}

func (e *budgetEngine) CheckGrammar(kind GrammarKind, spec string) error {
	time.Sleep(e.cost)
	return nil
}

func (e *budgetEngine) CheckGrammarBy(by time.Time, kind GrammarKind, spec string) error {
	e.mu.Lock()
	e.by = append(e.by, by)
	e.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	select {
	case <-time.After(e.cost):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("too large to compile within the request's grammar compile budget: %w", ctx.Err())
	}
}

// TestToolsShareOneCompileDeadline: a request's grammar compiles (each tool's parameters, then
// the composed constraint) share one deadline, so 45 tools that each take a while fail with a
// 400 naming the tool being compiled when the budget ran out, within the budget. Before, each
// compile had its own 30 s and a 45-tool request could hold a worker's CPU for minutes.
func TestToolsShareOneCompileDeadline(t *testing.T) {
	defer func(b time.Duration) { requestCompileBudget = b }(requestCompileBudget)
	requestCompileBudget = 300 * time.Millisecond
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &budgetEngine{gbnfEngine: gbnfEngine{tokEngine: tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}, tok: tok}}, cost: 40 * time.Millisecond}
	ts := serveEngine(t, e, true)
	var tools []string
	for i := range 45 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"f%d","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}}`, i))
	}
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"tools":[` + strings.Join(tools, ",") + `],"tool_choice":"required"}`
	start := time.Now()
	resp, b := post(t, ts, "/v1/chat/completions", body)
	took := time.Since(start)
	t.Logf("%d after %v: %s", resp.StatusCode, took, b)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "function.parameters") || !strings.Contains(string(b), "compile budget") {
		t.Fatalf("status %d %s, want a 400 naming the tool's parameters and the compile budget", resp.StatusCode, b)
	}
	if took > 3*requestCompileBudget {
		t.Errorf("took %v for a %v budget", took, requestCompileBudget)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, by := range e.by[1:] {
		if !by.Equal(e.by[0]) {
			t.Fatalf("checks of one request had deadlines %v and %v", e.by[0], by)
		}
	}
}
