package api

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/scheduler"
)

// TestSpecDecodeCounters: the vllm:spec_decode_* series sum the speculation counts of finished
// requests over every worker of a shared store (whichever worker is scraped), by draft position
// too, exist at 0 before any request, and a request without drafts adds nothing to them.
func TestSpecDecodeCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics")
	if err := metrics.CreateShared(path, 2); err != nil {
		t.Fatal(err)
	}
	var regs []*metrics.Registry
	var ms []*serverMetrics
	for w := range 2 {
		s, err := metrics.OpenShared(path, 2, w)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		reg := metrics.NewSharedRegistry(s)
		ms = append(ms, newServerMetrics(reg, "pico"))
		s.Seal()
		regs = append(regs, reg)
	}
	scrape := func(r *metrics.Registry) string {
		var b strings.Builder
		r.WriteText(&b)
		return b.String()
	}
	series := func(name string, pos int) string {
		if pos < 0 {
			return fmt.Sprintf(`vllm:spec_decode_%s_total{model_name="pico"}`, name)
		}
		return fmt.Sprintf(`vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="pico",position="%d"}`, pos)
	}
	expect := func(what string, want map[string]int) {
		t.Helper()
		for w, r := range regs {
			out := scrape(r)
			for s, v := range want {
				if line := fmt.Sprintf("%s %d\n", s, v); !strings.Contains(out, line) {
					t.Errorf("%s, worker %d: no line %q", what, w, strings.TrimSpace(line))
				}
			}
		}
	}
	zero := map[string]int{series("num_drafts", -1): 0, series("num_draft_tokens", -1): 0, series("num_accepted_tokens", -1): 0}
	for j := range scheduler.MaxDraftLimit {
		zero[series("", j)] = 0
	}
	expect("before any request", zero)

	// Worker 0 finishes a request that drafted in 4 steps (accepted 3, 2, 0 and 0 positions deep)
	// and one that never drafted; worker 1 one that drafted once, 6 deep, all taken.
	ms[0].finished(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: 12,
		SpecDrafts: 4, SpecDraftTokens: 14, SpecAccepted: []int{2, 2, 1}}, nil, time.Now())
	ms[0].finished(&Delta{Finished: true, FinishReason: FinishStop, CompletionTokens: 3}, nil, time.Now())
	ms[1].finished(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: 8,
		SpecDrafts: 1, SpecDraftTokens: 6, SpecAccepted: []int{1, 1, 1, 1, 1, 1}}, nil, time.Now())
	want := map[string]int{series("num_drafts", -1): 5, series("num_draft_tokens", -1): 20, series("num_accepted_tokens", -1): 11,
		series("", 0): 3, series("", 1): 3, series("", 2): 2, series("", 3): 1, series("", 4): 1, series("", 5): 1, series("", 6): 0}
	expect("after three requests", want)
}
