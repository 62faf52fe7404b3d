package metrics

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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

// This process's /proc entries read as the Prometheus process collector's series.
func TestProcessSeries(t *testing.T) {
	r := NewRegistry()
	r.RegisterProcess(Labels{{"process", "test"}}, os.Getpid)
	r.RegisterProcess(Labels{{"process", "gone"}}, func() int { return 0 })
	r.RegisterOwnProcess(Labels{{"process", "own"}})
	r.RegisterBuildInfo("1.2.3", "abc")
	var b strings.Builder
	r.WriteText(&b)
	out := b.String()
	vals := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			vals[name], _ = strconv.ParseFloat(v, 64)
		}
	}
	now := float64(time.Now().Unix())
	if v := vals[`process_resident_memory_bytes{process="test"}`]; v < 1<<20 || v > 1<<36 {
		t.Errorf("rss %v\n%s", v, out)
	}
	if v := vals[`process_start_time_seconds{process="test"}`]; v < now-3600 || v > now+1 {
		t.Errorf("start time %v, now %v", v, now)
	}
	if v := vals[`process_open_fds{process="test"}`]; v < 3 {
		t.Errorf("open fds %v", v)
	}
	if v := vals[`go_goroutines{process="own"}`]; v < 1 {
		t.Errorf("goroutines %v\n%s", v, out)
	}
	if strings.Contains(out, `process="gone"`) {
		t.Errorf("a process that is gone has series")
	}
	if !strings.Contains(out, `llmserve_build_info{version="1.2.3",revision="abc",goversion="go`) {
		t.Errorf("no build info:\n%s", out)
	}
}

// Per-worker series of a shared store: a scrape of any worker writes every live worker's value,
// labelled by worker; a worker that stops publishing drops out.
func TestWorkerSeriesEngineWide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m")
	if err := CreateShared(path, 2); err != nil {
		t.Fatal(err)
	}
	var regs [2]*Registry
	for i := range regs {
		s, err := OpenShared(path, 2, i)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		regs[i] = NewSharedRegistry(s)
		v := float64(10 + i)
		regs[i].NewWorkerGaugeFunc("llm_worker_in_flight_requests", "In flight.", nil, func() float64 { return v })
		s.Seal()
		regs[i].publish()
	}
	for i, r := range regs {
		var b strings.Builder
		r.WriteText(&b)
		for _, want := range []string{`llm_worker_in_flight_requests{worker="0"} 10`, `llm_worker_in_flight_requests{worker="1"} 11`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("scrape of worker %d lacks %s:\n%s", i, want, b.String())
			}
		}
	}
}
