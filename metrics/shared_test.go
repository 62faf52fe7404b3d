package metrics

import (
	"path/filepath"
	"strings"
	"testing"
)

// worker registers the series every worker of one build registers, in the same order.
func sharedWorker(t *testing.T, path string, workers, index int) (*Registry, *Counter, *Histogram, *Shared) {
	t.Helper()
	s, err := OpenShared(path, workers, index)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := NewSharedRegistry(s)
	c := r.NewCounter("llm_generation_tokens_total", "Tokens.", Labels{{"model_name", "pico"}})
	h := r.NewHistogram("llm_e2e_seconds", "Latency.", nil, []float64{0.1, 1})
	s.Seal()
	return r, c, h, s
}

func scrape(r *Registry) string {
	var b strings.Builder
	r.WriteText(&b)
	return b.String()
}

// TestSharedSumsWorkers: every worker's scrape shows the sum of all workers' counts, a restarted
// worker counts on from its slot, and a slot of another layout is left out.
func TestSharedSumsWorkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics")
	if err := CreateShared(path, 3); err != nil {
		t.Fatal(err)
	}
	r0, c0, h0, _ := sharedWorker(t, path, 3, 0)
	r1, c1, h1, s1 := sharedWorker(t, path, 3, 1)
	c0.Add(5)
	c1.Add(7)
	h0.Observe(0.05)
	h1.Observe(0.5)
	h1.Observe(3)
	for i, r := range []*Registry{r0, r1} {
		out := scrape(r)
		for _, want := range []string{
			`llm_generation_tokens_total{model_name="pico"} 12`,
			`llm_e2e_seconds_bucket{le="0.1"} 1`,
			`llm_e2e_seconds_bucket{le="1"} 2`,
			`llm_e2e_seconds_bucket{le="+Inf"} 3`,
			"llm_e2e_seconds_sum 3.55",
			"llm_e2e_seconds_count 3",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("worker %d's scrape lacks %q:\n%s", i, want, out)
			}
		}
	}
	// Worker 1 restarts: its counts stay in the sums and it adds to them.
	s1.Close()
	_, c1, _, _ = sharedWorker(t, path, 3, 1)
	if got := c0.Value(); got != 12 {
		t.Errorf("after worker 1 restarted the total is %g, want 12", got)
	}
	c1.Inc()
	if got := c0.Value(); got != 13 {
		t.Errorf("total %g, want 13", got)
	}
	// Worker 2 runs another layout (another build): left out, nothing misread.
	s2, err := OpenShared(path, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r2 := NewSharedRegistry(s2)
	other := r2.NewCounter("llm_other_total", "Other.", nil)
	s2.Seal()
	other.Add(1000)
	if got := c0.Value(); got != 13 {
		t.Errorf("a slot of another layout changed the total to %g", got)
	}
}

func TestSharedRejectsMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics")
	if err := CreateShared(path, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenShared(path, 3, 0); err == nil {
		t.Error("a store for 2 workers opened for 3")
	}
	if _, err := OpenShared(path, 2, 2); err == nil {
		t.Error("worker index 2 of 2 accepted")
	}
	if _, err := OpenShared(filepath.Join(t.TempDir(), "none"), 2, 0); err == nil {
		t.Error("a missing store opened")
	}
}
