package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmserve/llmserve/shard"
)

func snap(loads ...[2]int) shard.Snapshot {
	var s shard.Snapshot
	for r, l := range loads {
		s.Ranks = append(s.Ranks, shard.RankLoad{Rank: r, Up: l[0] >= 0, Reported: shard.Load{Running: max(l[0], 0), Waiting: l[1]}})
	}
	return s
}

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		s    shard.Snapshot
		want float64
		peak int
		ok   bool
	}{
		{snap([2]int{25, 0}, [2]int{25, 0}, [2]int{25, 0}, [2]int{25, 0}), 1, 25, true},
		{snap([2]int{30, 10}, [2]int{20, 0}, [2]int{20, 0}, [2]int{10, 0}), 40.0 / 22.5, 40, true},
		{snap([2]int{0, 0}, [2]int{0, 0}), 0, 0, false},
		// A down rank (-1) is left out of the mean.
		{snap([2]int{10, 0}, [2]int{-1, 0}, [2]int{10, 0}), 1, 10, true},
	} {
		s := c.s
		got, peak, _, _, ok := ratioTotal(&s)
		if ok != c.ok || peak != c.peak || got != c.want {
			t.Errorf("ratio(%+v) = %v, %d, %v; want %v, %d, %v", c.s.Ranks, got, peak, ok, c.want, c.peak, c.ok)
		}
	}
}

func TestSummarize(t *testing.T) {
	r := make([]float64, 100)
	for i := range r {
		r[i] = 1 + float64(i)/100 // 1.00 .. 1.99
	}
	im := summarize(r, 40, 22.5, 2)
	if im.Samples != 100 || im.P50 != 1.49 || im.P99 != 1.98 || im.Max != 1.99 || im.Errors != 2 || im.PeakRank != 40 {
		t.Errorf("summarize: %+v", im)
	}
	if d := im.Mean - 1.495; d > 1e-9 || d < -1e-9 {
		t.Errorf("mean %v, want 1.495", im.Mean)
	}
	if e := summarize(nil, 0, 0, 0); e.Samples != 0 || e.Max != 0 {
		t.Errorf("empty summarize: %+v", e)
	}
}

func TestParseLoadgen(t *testing.T) {
	out := "loadgen table line\n  ttft ...\n{\"concurrency\":256,\"requests\":512,\"completed\":510,\"failed\":2,\"output_tok_per_s\":123.5,\"ttft\":{\"p50_ms\":10,\"p99_ms\":99.5}}\n"
	s, err := parseLoadgen([]byte(out))
	if err != nil || s.Concurrency != 256 || s.Completed != 510 || s.Failed != 2 || s.TTFT.P99 != 99.5 || s.OutputTokPerSec != 123.5 {
		t.Fatalf("parseLoadgen: %+v, %v", s, err)
	}
	if _, err := parseLoadgen([]byte("no json here\n")); err == nil {
		t.Fatal("parseLoadgen accepted output without a summary")
	}
}

// TestRealMainSamplesWhileLoadgenRuns runs the command against an HTTP server that serves a
// /get_load whose rank loads change with every poll, with a stand-in load generator script
// that waits until it has been polled a few times and prints a summary line.
func TestRealMainSamplesWhileLoadgenRuns(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/get_load" {
			http.NotFound(w, r)
			return
		}
		n := int(polls.Add(1))
		s := snap([2]int{10 + n%3, 0}, [2]int{10, 0})
		s.Method = "shortest_queue"
		_ = json.NewEncoder(w).Encode(loadView{Dispatch: s})
	}))
	defer srv.Close()
	dir := t.TempDir()
	lg := filepath.Join(dir, "loadgen")
	script := "#!/bin/sh\n" +
		"case \"$*\" in *-json*) ;; *) echo missing -json >&2; exit 2;; esac\n" +
		"sleep 0.5\n" +
		"echo '{\"concurrency\":8,\"requests\":16,\"completed\":16,\"failed\":0,\"output_tok_per_s\":1000,\"ttft\":{\"p50_ms\":5,\"p99_ms\":9}}'\n"
	if err := os.WriteFile(lg, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := realMain([]string{"-url", srv.URL, "-loadgen", lg, "-sample", "20ms", "-min-total", "21", "--", "-concurrency", "8"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &res); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	if res.Method != "shortest_queue" || res.Ranks != 2 || res.Concurrency != 8 || res.TTFTP99ms != 9 {
		t.Errorf("result %+v", res)
	}
	if res.Imbalance.Samples < 5 || res.Imbalance.Max < 1 || res.Imbalance.Max > 12.0/11 {
		t.Errorf("imbalance %+v: want >= 5 samples with max/mean in [1, 12/11]", res.Imbalance)
	}
	// Only the samples with 21 or 22 requests (rank 0 at 11 or 12) count as steady.
	if res.Steady.Samples == 0 || res.Steady.Samples >= res.Imbalance.Samples || res.Steady.Max > 12.0/11 || res.Steady.Mean <= 1 {
		t.Errorf("steady %+v (all %+v): want only the samples with >= 21 requests", res.Steady, res.Imbalance)
	}
}

func TestRealMainNoEngine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := realMain([]string{"-url", "http://127.0.0.1:1", "-loadgen", "/bin/false"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "engine at") {
		t.Fatalf("exit %d, stderr %q: want 2 naming the engine", code, stderr.String())
	}
}
