package api

import (
	"encoding/json"
	"slices"
	"testing"

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
