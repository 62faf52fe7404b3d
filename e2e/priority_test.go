package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPriorityScheduling: under --scheduling-policy priority with one running slot, a
// priority-0 request sent while a priority-10 one streams preempts it and finishes first; the
// preempted one resumes and writes exactly what it writes alone (greedy), and the preemption
// is counted. priority is no longer named ignored, and out of int32 range it is a 400.
func TestPriorityScheduling(t *testing.T) {
	e := startEngine(t, engineOpts{schedArgs: []string{"--scheduling-policy", "priority", "--max-running-requests", "1"},
		tokArgs: []string{"--scheduling-policy", "priority"}})
	low := map[string]any{"prompt": "def main():\n", "max_tokens": 300, "temperature": 0, "ignore_eos": true, "priority": 10}
	type done struct {
		text string
		at   time.Time
	}
	lowDone := make(chan done, 1)
	started := make(chan struct{})
	go func() {
		body := map[string]any{"stream": true}
		for k, v := range low {
			body[k] = v
		}
		var text strings.Builder
		once := false
		err := e.streamEvents(context.Background(), "/v1/completions", body, func(data []byte) error {
			if string(data) == "[DONE]" {
				return nil
			}
			var c struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(data, &c); err != nil {
				return err
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Text)
			}
			if !once {
				once = true
				close(started)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		lowDone <- done{text.String(), time.Now()}
	}()
	<-started
	code, body := e.post("/v1/completions", map[string]any{"prompt": "x = ", "max_tokens": 4, "temperature": 0, "priority": 0})
	highAt := time.Now()
	if code != 200 {
		t.Fatalf("high priority: %d %s", code, body)
	}
	l := <-lowDone
	if !l.at.After(highAt) {
		t.Fatalf("the priority-10 request finished at %v, before the priority-0 one (%v)", l.at, highAt)
	}
	// alone, the same greedy request writes the same text
	code, body = e.post("/v1/completions", low)
	var alone struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if code != 200 || json.Unmarshal(body, &alone) != nil || alone.Choices[0].Text != l.text {
		t.Fatalf("preempted text differs from the text alone (%d): %q vs %q", code, l.text, body)
	}
	metrics, err := httpGet(e.base + "/metrics")
	if err != nil || !strings.Contains(metrics, "vllm:num_preemptions_total{") {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "vllm:num_preemptions_total{") && strings.HasSuffix(line, " 0") {
			t.Fatalf("no preemption counted: %s", line)
		}
	}
	// priority orders the queue: not named ignored; out of range: 400
	b, _ := json.Marshal(map[string]any{"prompt": "x", "max_tokens": 1, "priority": 3})
	resp, err := http.Post(e.base+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := resp.Header.Get("X-LLMServe-Ignored-Fields"); strings.Contains(h, "priority") {
		t.Fatalf("priority named ignored under the priority policy: %q", h)
	}
	if code, body := e.post("/generate", map[string]any{"text": "x", "priority": 1e10}); code != 400 || !strings.Contains(string(body), "priority") {
		t.Fatalf("priority 1e10: %d %s", code, body)
	}
}
