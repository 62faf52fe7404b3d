package e2e

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// manyAlternatives is a GBNF grammar of n rules `rK ::= .+` under one alternation, after prefix:
// each mask from where the alternatives are active closes n configurations per token tried.
func manyAlternatives(prefix string, n int) string {
	var sb strings.Builder
	sb.WriteString("root ::= ")
	if prefix != "" {
		fmt.Fprintf(&sb, "%q ", prefix)
	}
	sb.WriteString("alts\nalts ::= r0")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&sb, " | r%d", i)
	}
	for i := range n {
		fmt.Fprintf(&sb, "\nr%d ::= .+", i)
	}
	return sb.String() + "\n"
}

// plainLatencies times n plain /generate requests of 16 tokens, one after another.
func plainLatencies(t *testing.T, e *engine, n int) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range n {
		start := time.Now()
		code, b := e.post("/generate", map[string]any{"text": fmt.Sprintf("hello %d", i),
			"sampling_params": map[string]any{"max_new_tokens": 16, "temperature": 0, "ignore_eos": true}})
		if code != http.StatusOK {
			t.Fatalf("plain request: %d %s", code, b)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// workerRSS reads each tokenizer worker's resident memory off /metrics (every worker's series
// show in any scrape), keyed by the series' labels.
func workerRSS(t *testing.T, e *engine) map[string]float64 {
	t.Helper()
	resp, err := freshClient.Get(e.base + "/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "process_resident_memory_bytes{") || !strings.Contains(line, "worker=") {
			continue
		}
		labels, val, _ := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out[labels] = v
	}
	if len(out) == 0 {
		t.Fatalf("/metrics has no worker process_resident_memory_bytes:\n%.2000s", b)
	}
	return out
}

func pctl(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// TestGrammarBombsAre400s: grammars that would take gigabytes to build (nested {m,n}) or
// seconds per mask (30,000 `.+` alternatives) are 400s naming the limit they hit, through
// guided_grammar and /generate's grammar, while plain requests on the same rank go on. Before,
// the first kind grew a worker by gigabytes and the second compiled and then held every step
// of its rank for seconds per token. Latencies are reported, not asserted (a shared machine).
func TestGrammarBombsAre400s(t *testing.T) {
	e := startEngine(t, engineOpts{})
	unloaded := plainLatencies(t, e, 8)
	rssBefore := workerRSS(t, e)
	bombs := []struct {
		name, grammar, want string
	}{
		{"nested repetition", `root ::= (("a"{1000}){1000}){1000}`, "node limit"},
		{"nested repetition, two rules", "root ::= x{1000}\nx ::= (\"ab\"{1000}){1000}\n", "node limit"},
		{"30000 alternatives", manyAlternatives("", 30000), "alternatives active at once"},
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var loaded []time.Duration
	var mu sync.Mutex
	wg.Add(1)
	go func() { // plain requests all along
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			code, b := e.post("/generate", map[string]any{"text": fmt.Sprintf("hello %d", i),
				"sampling_params": map[string]any{"max_new_tokens": 16, "temperature": 0, "ignore_eos": true}})
			if code != http.StatusOK {
				t.Errorf("plain request during the bombs: %d %s", code, b)
				return
			}
			mu.Lock()
			loaded = append(loaded, time.Since(start))
			mu.Unlock()
		}
	}()
	for _, bomb := range bombs {
		for _, r := range []struct {
			path, field string
			body        map[string]any
		}{
			{"/generate", "grammar", map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 4, "grammar": bomb.grammar}}},
			{"/v1/chat/completions", "guided_grammar", map[string]any{"model": "pico", "max_tokens": 4,
				"messages": []map[string]string{{"role": "user", "content": "x"}}, "guided_grammar": bomb.grammar}},
		} {
			start := time.Now()
			code, b := e.post(r.path, r.body)
			if code != http.StatusBadRequest || !strings.Contains(string(b), bomb.want) {
				t.Errorf("%s via %s: %d %.300s, want a 400 naming %q", bomb.name, r.field, code, b, bomb.want)
			}
			t.Logf("%s via %s: %d in %v", bomb.name, r.field, code, time.Since(start).Round(time.Millisecond))
		}
	}
	close(stop)
	wg.Wait()
	if len(loaded) == 0 {
		t.Fatal("no plain request completed during the bombs")
	}
	t.Logf("plain /generate of 16 tokens: unloaded p50 %v max %v; during the bombs (%d requests) p50 %v p99 %v",
		pctl(unloaded, 0.5), pctl(unloaded, 1), len(loaded), pctl(loaded, 0.5), pctl(loaded, 0.99))
	// Worker memory, reported (the target is growth under 100 MB; the repetition bombs
	// are refused before building, the 30,000-rule one only after its rules are built). The
	// series are published once a second.
	time.Sleep(1500 * time.Millisecond)
	for series, after := range workerRSS(t, e) {
		t.Logf("%s: RSS %.0f MiB -> %.0f MiB", series, rssBefore[series]/(1<<20), after/(1<<20))
	}
}

// TestSlowMaskFailsAlone: a grammar that compiles (its costly part hides behind a prefix longer
// than what the compile explores) but whose masks take longer than the mask deadline fails its
// own request naming the deadline, and a plain request sharing its steps completes. Before, the
// scheduler waited for the mask however long it took, every request on the rank with it.
func TestSlowMaskFailsAlone(t *testing.T) {
	e := startEngine(t, engineOpts{})
	unloaded := plainLatencies(t, e, 4)
	slow := manyAlternatives(strings.Repeat("z", 100), 4000)
	var wg sync.WaitGroup
	var plain []time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(200 * time.Millisecond)
		plain = plainLatencies(t, e, 4)
	}()
	start := time.Now()
	code, b := e.post("/generate", map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 120, "grammar": slow}})
	took := time.Since(start)
	wg.Wait()
	if code == http.StatusOK && !strings.Contains(string(b), "deadline") {
		t.Fatalf("slow-mask request: %d %.300s, want it failed naming the mask deadline", code, b)
	}
	if !strings.Contains(string(b), "deadline") {
		t.Errorf("slow-mask request: %d %.300s, want the mask deadline named", code, b)
	}
	t.Logf("slow-mask request: %d after %v: %.200s", code, took.Round(time.Millisecond), b)
	t.Logf("plain /generate of 16 tokens: unloaded max %v; beside the slow mask max %v", pctl(unloaded, 1), pctl(plain, 1))
}
