package metrics

import (
	"strings"
	"testing"
)

func TestExposition(t *testing.T) {
	r := NewRegistry()
	c := r.NewCounter("llm_requests_total", "Requests.", Labels{{"endpoint", "/generate"}})
	c.Inc()
	c.Add(2)
	r.NewGaugeFunc("llm_queue", "Queue.", Labels{{"rank", "0"}}, func() float64 { return 7 })
	r.NewCounterFunc("llm_rank_preemptions_total", "Preemptions.", Labels{{"rank", "1"}}, func() float64 { return 4 })
	h := r.NewHistogram("llm_ttft_seconds", "TTFT.", nil, []float64{0.1, 1})
	h.Observe(0.05)
	h.Observe(0.5)
	h.Observe(5)
	var b strings.Builder
	r.WriteText(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE llm_requests_total counter",
		`llm_requests_total{endpoint="/generate"} 3`,
		`llm_queue{rank="0"} 7`,
		"# TYPE llm_rank_preemptions_total counter",
		`llm_rank_preemptions_total{rank="1"} 4`,
		`llm_ttft_seconds_bucket{le="0.1"} 1`,
		`llm_ttft_seconds_bucket{le="1"} 2`,
		`llm_ttft_seconds_bucket{le="+Inf"} 3`,
		"llm_ttft_seconds_sum 5.55",
		"llm_ttft_seconds_count 3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestLabelEscaping(t *testing.T) {
	got := Labels{{"a", "x\"y\\z\n"}}.String()
	if want := `{a="x\"y\\z\n"}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func BenchmarkCounterInc(b *testing.B) {
	c := NewRegistry().NewCounter("c", "c", nil)
	for b.Loop() {
		c.Inc()
	}
}
