package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRankRefusalsAre4xx: a request that only a rank can judge (with --skip-tokenizer-init the
// HTTP layer has no vocabulary, so a token id past the model's is first seen by the scheduler)
// is refused by the rank as the client's fault, and that kind crosses the wire: every endpoint
// answers 400 with the rank's reason in the OpenAI error body, and the engine serves the next
// request. Before, the refusal crossed as plain text and the API answered 500, as for an
// engine fault.
func TestRankRefusalsAre4xx(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1, skipTokInit: true})
	const outside = 99999 // pico's vocabulary is 8,192 ids
	for _, c := range []struct {
		path string
		body any
	}{
		{"/generate", map[string]any{"input_ids": []int32{400, outside}, "sampling_params": map[string]any{"max_new_tokens": 4}}},
		{"/v1/completions", map[string]any{"prompt": []int32{400, outside}, "max_tokens": 4}},
		{"/v1/completions", map[string]any{"prompt": []int32{400, outside}, "max_tokens": 4, "n": 2}},
		{"/v1/embeddings", map[string]any{"input": [][]int32{{400, 401}, {400, outside}}}},
	} {
		status, body := e.post(c.path, c.body)
		var got struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("%s %v: %d %s: not an error body: %v", c.path, c.body, status, body, err)
			continue
		}
		if status != 400 || got.Error.Code != 400 || got.Error.Type != "invalid_request_error" ||
			!strings.Contains(got.Error.Message, "99999, outside the vocabulary [0, 8192)") {
			t.Errorf("%s %v: %d %s, want a 400 invalid_request_error naming the id outside the vocabulary", c.path, c.body, status, body)
		}
	}
	// A stream has answered 200 before the rank's refusal arrives: its error event carries the
	// 400, the invalid_request_error type and the reason, and [DONE] ends it.
	for _, c := range []struct {
		path string
		body any
	}{
		{"/generate", map[string]any{"input_ids": []int32{400, outside}, "stream": true, "sampling_params": map[string]any{"max_new_tokens": 4}}},
		{"/v1/completions", map[string]any{"prompt": []int32{400, outside}, "max_tokens": 4, "stream": true}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		events, err := e.sseEvents(ctx, c.path, c.body)
		cancel()
		if err != nil || len(events) < 2 || events[len(events)-1] != "[DONE]" {
			t.Errorf("%s stream: %v, events %q", c.path, err, events)
			continue
		}
		var got struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(events[len(events)-2]), &got); err != nil || got.Error.Code != 400 ||
			got.Error.Type != "invalid_request_error" || !strings.Contains(got.Error.Message, "99999, outside the vocabulary") {
			t.Errorf("%s stream: last event %s (%v), want an invalid_request_error 400 naming the id", c.path, events[len(events)-2], err)
		}
	}
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0}})
	if len(r.OutputIDs) != 4 {
		t.Fatalf("a good request after the refusals: %+v", r)
	}
}
