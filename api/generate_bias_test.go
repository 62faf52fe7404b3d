package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// TestGenerateLogitBias: /generate's sampling_params.logit_bias reaches the request as on the
// OpenAI endpoints (sorted, zeros dropped) and is checked the same way, the 400 naming
// sampling_params.logit_bias.
func TestGenerateLogitBias(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/generate", `{"input_ids":[5,6],"sampling_params":{"max_new_tokens":1,"logit_bias":{"40":100,"7":-100,"12":0,"3":-2.5}}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	want := []sampling.Bias{{ID: 3, Value: -2.5}, {ID: 7, Value: -100}, {ID: 40, Value: 100}}
	if got := e.lastRequest().Sampling.LogitBias; !slices.Equal(got, want) {
		t.Fatalf("logit bias %v, want %v", got, want)
	}
	for _, bad := range []string{`{"x":1}`, `{"-1":1}`, `{"99999999":1}`, `{"5":100.5}`, `{"5":-101}`} {
		resp, body := post(t, ts, "/generate", `{"input_ids":[5,6],"sampling_params":{"max_new_tokens":1,"logit_bias":`+bad+`}}`)
		var v struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != 400 || v.Error.Param != "sampling_params.logit_bias" {
			t.Fatalf("%s: status %d %s, want a 400 naming sampling_params.logit_bias", bad, resp.StatusCode, body)
		}
	}
}

// TestPriorityField: under --scheduling-policy priority the priority field reaches the request
// on every generation endpoint and is not named ignored; under fcfs it is checked, left out of
// the request and named ignored; out of int32 range or not an integer it is a 400.
func TestPriorityField(t *testing.T) {
	for _, policy := range []string{"priority", "fcfs"} {
		e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
		tok, err := picoTokenizer()
		if err != nil {
			t.Fatal(err)
		}
		e.tok = tok
		srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, SchedulingPolicy: policy,
			DefaultSampling: sampling.DefaultParams(), GrammarStrict: true}, e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(srv.Handler())
		for _, c := range []struct{ path, body string }{
			{"/v1/completions", `{"prompt":"x","max_tokens":1,"priority":-7}`},
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"priority":-7}`},
			{"/v1/responses", `{"input":"x","max_output_tokens":1,"priority":-7}`},
			{"/generate", `{"text":"x","sampling_params":{"max_new_tokens":1},"priority":-7}`},
		} {
			resp, body := post(t, ts, c.path, c.body)
			named := strings.Contains(resp.Header.Get(IgnoredFieldsHeader), "priority")
			got := e.lastRequest().Priority
			if resp.StatusCode != 200 || (policy == "priority") != (got == -7) || (policy == "priority") == named {
				t.Errorf("%s %s: %d %s, priority %d, named ignored %v", policy, c.path, resp.StatusCode, body, got, named)
			}
			for _, bad := range []string{"1.5", "3000000000", `"high"`} {
				resp, body := post(t, ts, c.path, strings.Replace(c.body, "-7", bad, 1))
				if resp.StatusCode != 400 || !strings.Contains(body, `"param":"priority"`) {
					t.Errorf("%s priority %s: %d %s", c.path, bad, resp.StatusCode, body)
				}
			}
		}
		ts.Close()
	}
}
