package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPriorityQueueGauges: with one running slot held by a long stream, requests queued at
// priorities 5, 5 and 7 show on /metrics as llm_requests_waiting_by_priority{priority="5"} 2
// and {priority="7"} 1 (label values the rank reported, not fixed at registration); once the
// queue drains the family has no series left.
func TestPriorityQueueGauges(t *testing.T) {
	e := startEngine(t, engineOpts{schedArgs: []string{"--scheduling-policy", "priority", "--max-running-requests", "1"},
		tokArgs: []string{"--scheduling-policy", "priority"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	var runningDone sync.WaitGroup
	runningDone.Add(1)
	go func() {
		defer runningDone.Done()
		once := false
		// priority 0 runs first and is never preempted by the less urgent ones below; it is
		// cancelled once the gauges have been read
		_ = e.streamEvents(ctx, "/v1/completions", map[string]any{"prompt": "def main():\n", "max_tokens": 3000, "temperature": 0,
			"ignore_eos": true, "priority": 0, "stream": true}, func([]byte) error {
			if !once {
				once = true
				close(started)
			}
			return nil
		})
	}()
	<-started
	var queued sync.WaitGroup
	for _, p := range []int{5, 5, 7} {
		queued.Add(1)
		go func() {
			defer queued.Done()
			if code, body := e.post("/v1/completions", map[string]any{"prompt": "x = ", "max_tokens": 2, "temperature": 0, "priority": p}); code != 200 {
				t.Errorf("priority %d: %d %s", p, code, body)
			}
		}()
	}
	want := []string{`llm_requests_waiting_by_priority{model_name="`, `",priority="5"} 2`, `",priority="7"} 1`}
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := httpGet(e.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		last = m
		if strings.Contains(m, want[1]) && strings.Contains(m, want[2]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the per-priority gauges never showed the queue; last scrape:\n%s", grepLines(last, "waiting"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(last, "# TYPE llm_requests_waiting_by_priority gauge") || !strings.Contains(last, want[0]) {
		t.Fatalf("family header or labels missing:\n%s", grepLines(last, "waiting_by_priority"))
	}
	cancel()
	runningDone.Wait()
	queued.Wait()
	deadline = time.Now().Add(20 * time.Second)
	for {
		m, err := httpGet(e.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m, "llm_requests_waiting_by_priority{") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("series left after the queue drained:\n%s", grepLines(m, "waiting_by_priority"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
