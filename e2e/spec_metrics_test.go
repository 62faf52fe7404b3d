package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/scheduler"
)

// TestSpeculativeMetrics serves greedy requests whose continuation repeats their prompt, one at a
// time, on an engine with --speculative ngram (real processes and sockets, pico; also with 2 DP
// ranks and 2 tokenizer workers) and checks the vllm:spec_decode_* series it scrapes from
// /metrics against the requests and against the ranks' own counts: drafted >= accepted > 0;
// accepted split by draft position adds up to accepted, and no position is accepted more often
// than the one before it nor than there were verifications; the counts summed at the requests'
// finish equal the ranks' (llm_rank_spec_*); and, each request being alone on the engine, every
// completion token is an accepted draft or the one token a forward step samples without one
// (the first, a correction, a bonus): completion_tokens = accepted + steps. With --speculative
// off every series is there, at 0, and every completion token is a step's.
func TestSpeculativeMetrics(t *testing.T) {
	prompt := "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef add(a, b):\n"
	for _, c := range []struct {
		name, mode        string
		dp, workers, reqs int
	}{{"ngram", "ngram", 1, 1, 1}, {"ngram-dp2", "ngram", 2, 2, 4}, {"off", "off", 1, 1, 1}} {
		mode := c.mode
		t.Run(c.name, func(t *testing.T) {
			e := startEngine(t, engineOpts{dpSize: c.dp, workers: c.workers, schedArgs: []string{"--speculative", mode, "--speculative-max-draft", "6"}})
			before := scrapeCounters(t, e)
			completion := 0
			for i := range c.reqs {
				// The prompts differ in their last line, so their outputs differ.
				p := prompt + strings.Repeat("    ", i%2) + "return"[:2+i]
				code, body := e.post("/v1/completions", map[string]any{"model": "pico", "prompt": p, "max_tokens": 64,
					"temperature": 0, "ignore_eos": true})
				if code != 200 {
					t.Fatalf("/v1/completions: %d %s", code, body)
				}
				var resp struct {
					Choices []struct {
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(body, &resp); err != nil {
					t.Fatal(err)
				}
				// A request that ignores EOS ends by length, never on an accepted draft (a draft
				// is at most the tokens left but one), so no accepted draft is its last token.
				if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 64 {
					t.Fatalf("response %s", body)
				}
				completion += resp.Usage.CompletionTokens
			}
			// The finish is counted before the response is written; the rank's counters arrive
			// with its load reports, the last one after the finish at the latest.
			var after map[string]float64
			var d func(string) float64
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				after = scrapeCounters(t, e)
				d = func(name string) float64 { return sumSeries(after, name) - sumSeries(before, name) }
				if d("llm_rank_steps_total")+d("llm_rank_spec_accepted_tokens_total") >= float64(completion) || time.Now().After(deadline) {
					break
				}
			}
			drafts, drafted, accepted := d("vllm:spec_decode_num_drafts_total"), d("vllm:spec_decode_num_draft_tokens_total"), d("vllm:spec_decode_num_accepted_tokens_total")
			steps := d("llm_rank_steps_total")
			t.Logf("%s: %d completion tokens in %.0f steps; %.0f verifications, %.0f draft tokens, %.0f accepted",
				c.name, completion, steps, drafts, drafted, accepted)
			if g := d("vllm:generation_tokens_total"); g != float64(completion) {
				t.Errorf("generation tokens %.0f, usage says %d", g, completion)
			}
			if accepted+steps != float64(completion) {
				t.Errorf("%.0f accepted drafts + %.0f steps != %d completion tokens", accepted, steps, completion)
			}
			for vllm, rank := range map[string]string{"num_drafts": "drafts", "num_draft_tokens": "draft_tokens", "num_accepted_tokens": "accepted_tokens"} {
				if v, r := d("vllm:spec_decode_"+vllm+"_total"), d("llm_rank_spec_"+rank+"_total"); v != r {
					t.Errorf("vllm:spec_decode_%s_total went up by %.0f, the rank counted %.0f", vllm, v, r)
				}
			}
			var byPos float64
			prev := drafts
			for j := range scheduler.MaxDraftLimit {
				key := fmt.Sprintf(`vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="pico",position="%d"}`, j)
				v, ok := after[key]
				if !ok {
					t.Fatalf("no series %s", key)
				}
				v -= before[key]
				if v > prev {
					t.Errorf("position %d accepted %.0f times, more than position %d (or the verifications): %.0f", j, v, j-1, prev)
				}
				prev = v
				byPos += v
			}
			if byPos != accepted {
				t.Errorf("accepted by position adds up to %.0f, accepted %.0f", byPos, accepted)
			}
			for _, name := range []string{"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"} {
				if _, ok := after[name+`{model_name="pico"}`]; !ok {
					t.Errorf("no series %s", name)
				}
			}
			switch mode {
			case "ngram":
				if !(drafted >= accepted && accepted > 0 && drafted >= drafts && drafts > 0) {
					t.Errorf("drafted %.0f tokens in %.0f verifications, accepted %.0f", drafted, drafts, accepted)
				}
			case "off":
				if drafts != 0 || drafted != 0 || accepted != 0 || sumSeries(after, "vllm:spec_decode_num_accepted_tokens_total") != 0 {
					t.Errorf("without speculation: %.0f verifications, %.0f draft tokens, %.0f accepted", drafts, drafted, accepted)
				}
			}
		})
	}
}

// scrapeCounters reads the engine's counters from /metrics.
func scrapeCounters(t *testing.T, e *engine) map[string]float64 {
	t.Helper()
	text, err := httpGet(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return counterSamples(t, text)
}

// sumSeries sums every series of the family name (whatever its labels); of a per-worker family
// (llm_rank_*: each worker's view of every rank), worker 0's series only.
func sumSeries(samples map[string]float64, name string) float64 {
	var v float64
	for k, x := range samples {
		if k == name || strings.HasPrefix(k, name+"{") && (!strings.Contains(k, `worker="`) || strings.Contains(k, `worker="0"`)) {
			v += x
		}
	}
	return v
}
