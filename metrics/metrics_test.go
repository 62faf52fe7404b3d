package metrics

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
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

// ReadGoRuntime reads this process's runtime: values a live Go process must have, and the same
// values again within the second.
func TestReadGoRuntime(t *testing.T) {
	g := ReadGoRuntime()
	if g.Goroutines < 1 || g.GOMAXPROCS < 1 || g.HeapAllocBytes == 0 || g.HeapInuseBytes < g.HeapAllocBytes ||
		g.SysBytes < g.HeapInuseBytes || g.HeapGoalBytes == 0 || g.GoVersion != runtime.Version() {
		t.Fatalf("implausible runtime stats %+v", g)
	}
	if again := ReadGoRuntime(); again != g {
		t.Errorf("a second read within the second differs: %+v, then %+v", g, again)
	}
}

func TestHistogramTotal(t *testing.T) {
	h := &rtmetrics.Float64Histogram{Counts: []uint64{1, 2, 0, 3}, Buckets: []float64{math.Inf(-1), 1, 3, 5, math.Inf(1)}}
	if got, want := histogramTotal(h), 1*1.0+2*2.0+3*5.0; got != want {
		t.Errorf("histogramTotal = %v, want %v", got, want)
	}
}

// Another process's stats: its go_* series and go_info under its labels, none while it has not
// reported.
func TestRegisterGoRuntime(t *testing.T) {
	r := NewRegistry()
	g := GoRuntime{Goroutines: 17, GOMAXPROCS: 4, HeapAllocBytes: 1000, HeapInuseBytes: 2048, SysBytes: 9000,
		HeapGoalBytes: 4096, GCCycles: 3, GCPauseSeconds: 0.25, GoVersion: "go1.99"}
	have := false
	r.RegisterGoRuntime(Labels{{"process", "schedulerd"}, {"rank", "1"}}, func() (GoRuntime, bool) { return g, have })
	var b strings.Builder
	r.WriteText(&b)
	if strings.Contains(b.String(), `rank="1"`) {
		t.Fatalf("series before any report:\n%s", b.String())
	}
	have = true
	b.Reset()
	r.WriteText(&b)
	for _, want := range []string{
		`go_goroutines{process="schedulerd",rank="1"} 17`,
		`go_threads{process="schedulerd",rank="1"} 4`,
		`go_memstats_heap_alloc_bytes{process="schedulerd",rank="1"} 1000`,
		`go_memstats_heap_inuse_bytes{process="schedulerd",rank="1"} 2048`,
		`go_memstats_sys_bytes{process="schedulerd",rank="1"} 9000`,
		`go_gc_heap_goal_bytes{process="schedulerd",rank="1"} 4096`,
		`go_gc_cycles_total{process="schedulerd",rank="1"} 3`,
		`go_gc_pause_seconds_total{process="schedulerd",rank="1"} 0.25`,
		`go_info{process="schedulerd",rank="1",version="go1.99"} 1`,
		"# TYPE go_gc_cycles_total counter",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("missing %s:\n%s", want, b.String())
		}
	}
}
