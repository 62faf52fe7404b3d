package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// referenceLogits runs `schedulerd generate --print-logits` on ids: the logits at the last
// position, computed with no scheduler, batching, sockets or HTTP.
func referenceLogits(t *testing.T, ids []int32) []float32 {
	t.Helper()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	out, err := exec.Command(filepath.Join(binDir, "schedulerd"), "generate", "--model-path", modelPath,
		"--input-ids", strings.Join(s, ","), "--max-new-tokens", "1", "--print-logits").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("schedulerd generate --print-logits: %v\n%s", err, stderr)
	}
	var res struct {
		LastLogits []float32 `json:"last_logits"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.LastLogits) == 0 {
		t.Fatalf("schedulerd generate output: %v", err)
	}
	return res.LastLogits
}

// logSoftmax is the float64 log softmax over the whole vocabulary.
func logSoftmax(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = math.Max(m, float64(l))
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) - m)
	}
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l) - m - math.Log(z)
	}
	return out
}

// TestAPIExtensions runs the issue-13 features against a real two-rank engine.
func TestAPIExtensions(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1, dpSize: 2})

	t.Run("health_generate", func(t *testing.T) {
		var v struct {
			Status string `json:"status"`
			Ranks  []struct {
				Rank  int   `json:"rank"`
				Token int32 `json:"token"`
			} `json:"ranks"`
		}
		if code := e.getJSON("/health_generate", &v); code != 200 || v.Status != "ok" || len(v.Ranks) != 2 {
			t.Fatalf("/health_generate: %d %+v", code, v)
		}
		// Both ranks ran the same greedy step on the same id.
		if v.Ranks[0].Token < 0 || v.Ranks[0].Token != v.Ranks[1].Token {
			t.Fatalf("ranks generated %+v", v.Ranks)
		}
	})

	t.Run("top logprobs equal a full-vocabulary softmax", func(t *testing.T) {
		code, body := e.post("/v1/completions", map[string]any{"prompt": promptIDs, "max_tokens": 4, "temperature": 0,
			"logprobs": 5, "ignore_eos": true, "return_token_ids": true})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var v struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
				Logprobs struct {
					TokenLogprobs []float64            `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		c := v.Choices[0]
		// /generate gives the top ids (completions key them by token text).
		code, gbody := e.post("/generate", map[string]any{"input_ids": promptIDs, "return_logprob": true, "top_logprobs_num": 5,
			"sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}})
		if code != 200 {
			t.Fatalf("%d %s", code, gbody)
		}
		var g struct {
			OutputIDs []int32 `json:"output_ids"`
			MetaInfo  struct {
				Output [][3]any   `json:"output_token_logprobs"`
				Top    [][][3]any `json:"output_top_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(gbody, &g); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(g.OutputIDs, c.TokenIDs) || len(g.MetaInfo.Top) != 4 || len(c.Logprobs.TopLogprobs) != 4 {
			t.Fatalf("completions %v, generate %v (%d top)", c.TokenIDs, g.OutputIDs, len(g.MetaInfo.Top))
		}
		ctx := slices.Clone(promptIDs)
		for i, id := range g.OutputIDs {
			ref := logSoftmax(referenceLogits(t, ctx))
			order := make([]int, len(ref))
			for j := range order {
				order[j] = j
			}
			sort.SliceStable(order, func(a, b int) bool { return ref[order[a]] > ref[order[b]] })
			var sumGot, sumRef float64
			for j, entry := range g.MetaInfo.Top[i] {
				lp, tid := entry[0].(float64), int(entry[1].(float64))
				if tid != order[j] || math.Abs(lp-ref[tid]) > 2e-3 {
					t.Fatalf("position %d rank %d: id %d logprob %v, reference id %d logprob %v", i, j, tid, lp, order[j], ref[order[j]])
				}
				sumGot += math.Exp(lp)
				sumRef += math.Exp(ref[order[j]])
			}
			if sumGot > 1+1e-4 || math.Abs(sumGot-sumRef) > 2e-3 {
				t.Fatalf("position %d: top-5 probability mass %v, reference %v", i, sumGot, sumRef)
			}
			// Greedy: the sampled token is the top one, with the same logprob everywhere.
			if int(id) != order[0] || math.Abs(c.Logprobs.TokenLogprobs[i]-ref[id]) > 2e-3 ||
				math.Abs(g.MetaInfo.Output[i][0].(float64)-ref[id]) > 2e-3 {
				t.Fatalf("position %d: sampled %d (%v / %v), reference top %d (%v)", i, id, c.Logprobs.TokenLogprobs[i], g.MetaInfo.Output[i][0], order[0], ref[order[0]])
			}
			if len(c.Logprobs.TopLogprobs[i]) < 5 {
				t.Fatalf("position %d: completions top_logprobs %v", i, c.Logprobs.TopLogprobs[i])
			}
			ctx = append(ctx, id)
		}
	})

	t.Run("echo prompt logprobs equal schedulerd generate --print-logits", func(t *testing.T) {
		// lm-evaluation-harness's loglikelihood request: a batch of id lists, echo, logprobs 1,
		// max_tokens 1; the prompt (cached by the tests above) is scored in full.
		other := []int32{9, 66, 180, 400, 1234}
		code, body := e.post("/v1/completions", map[string]any{"prompt": [][]int32{promptIDs, other}, "max_tokens": 1,
			"temperature": 0, "echo": true, "logprobs": 1})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var v struct {
			Choices []struct {
				Logprobs struct {
					Tokens        []string             `json:"tokens"`
					TokenLogprobs []*float64           `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &v); err != nil || len(v.Choices) != 2 {
			t.Fatalf("%s: %v", body, err)
		}
		code, gbody := e.post("/generate", map[string]any{"input_ids": promptIDs, "return_logprob": true, "logprob_start_len": 0,
			"sampling_params": map[string]any{"max_new_tokens": 1, "temperature": 0}})
		if code != 200 {
			t.Fatalf("%d %s", code, gbody)
		}
		var g struct {
			MetaInfo struct {
				Input [][3]any `json:"input_token_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(gbody, &g); err != nil || len(g.MetaInfo.Input) != len(promptIDs) || g.MetaInfo.Input[0][0] != nil {
			t.Fatalf("/generate input_token_logprobs: %s", gbody)
		}
		for c, prompt := range [][]int32{promptIDs, other} {
			lp := v.Choices[c].Logprobs
			if len(lp.TokenLogprobs) != len(prompt)+1 || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
				t.Fatalf("choice %d: %d entries for a %d-token prompt and 1 generated: %+v", c, len(lp.TokenLogprobs), len(prompt), lp)
			}
			for p := 1; p < len(prompt); p++ {
				ref := logSoftmax(referenceLogits(t, prompt[:p]))[prompt[p]]
				if got := *lp.TokenLogprobs[p]; math.Abs(got-ref) > 2e-3 {
					t.Fatalf("choice %d, prompt token %d: logprob %v, --print-logits gives %v", c, p, got, ref)
				}
				if c == 0 {
					if got := g.MetaInfo.Input[p][0].(float64); math.Abs(got-ref) > 2e-3 {
						t.Fatalf("/generate prompt token %d: %v, want %v", p, got, ref)
					}
				}
			}
		}
	})

	t.Run("logit_bias forces and bans", func(t *testing.T) {
		greedy := directGenerate(t, promptIDs, 1)[0]
		const forced = 1234
		r := generateWith(t, e, "/v1/completions", map[string]any{"prompt": promptIDs, "max_tokens": 6, "temperature": 1, "seed": 7,
			"ignore_eos": true, "return_token_ids": true, "logit_bias": map[string]float64{fmt.Sprint(forced): 100}})
		for _, id := range r {
			if id != forced {
				t.Fatalf("+100 on %d generated %v", forced, r)
			}
		}
		r = generateWith(t, e, "/v1/completions", map[string]any{"prompt": promptIDs, "max_tokens": 1, "temperature": 0,
			"return_token_ids": true, "logit_bias": map[string]float64{fmt.Sprint(greedy): -100}})
		if len(r) != 1 || r[0] == greedy {
			t.Fatalf("-100 on the greedy token %d generated %v", greedy, r)
		}
		// the same on /generate's sampling_params (SGLang's)
		code, body := e.post("/generate", map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 6,
			"temperature": 1, "seed": 7, "ignore_eos": true, "logit_bias": map[string]float64{fmt.Sprint(forced): 100}}})
		var g struct {
			OutputIDs []int32 `json:"output_ids"`
		}
		if code != 200 || json.Unmarshal(body, &g) != nil || len(g.OutputIDs) != 6 {
			t.Fatalf("/generate logit_bias: %d %s", code, body)
		}
		for _, id := range g.OutputIDs {
			if id != forced {
				t.Fatalf("/generate +100 on %d generated %v", forced, g.OutputIDs)
			}
		}
	})

	t.Run("guided_choice and ignored fields", func(t *testing.T) {
		choices := []string{"alpha", "beta (b)", "gamma.*"}
		for seed := range 4 {
			b, _ := json.Marshal(map[string]any{"prompt": "Pick one:", "max_tokens": 16, "temperature": 1, "seed": seed,
				"guided_choice": choices, "request_id": "mine", "priority": 1, "prompt_cache_key": "k"})
			resp, err := http.Post(e.base+"/v1/completions", "application/json", strings.NewReader(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(v.Choices) != 1 || !slices.Contains(choices, v.Choices[0].Text) {
				t.Fatalf("seed %d: %d %+v, want one of %q", seed, resp.StatusCode, v, choices)
			}
			if h := resp.Header.Get("X-LLMServe-Ignored-Fields"); h != "request_id,priority,prompt_cache_key" {
				t.Fatalf("ignored header %q", h)
			}
		}
	})

	t.Run("n=4 shares the prompt's KV and is deterministic per seed", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 13))
		prompt := make([]int32, 40) // two full 16-token blocks to share, and a partial one
		for i := range prompt {
			prompt[i] = int32(100 + rng.IntN(3000))
		}
		hits := func() float64 {
			var sum float64
			for _, ranks := range rankMetrics(t, e)["llm_rank_prefix_hit_tokens_total"] {
				for _, v := range ranks {
					sum += v
				}
			}
			return sum
		}
		before := hits()
		body := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 1, "seed": 42, "n": 4,
			"ignore_eos": true, "return_token_ids": true}
		run := func() ([][]int32, map[string]any) {
			code, b := e.post("/v1/completions", body)
			if code != 200 {
				t.Fatalf("%d %s", code, b)
			}
			var v struct {
				Choices []struct {
					Index    int     `json:"index"`
					TokenIDs []int32 `json:"token_ids"`
				} `json:"choices"`
				Usage map[string]any `json:"usage"`
			}
			if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 4 {
				t.Fatalf("%s: %v", b, err)
			}
			var out [][]int32
			for j, c := range v.Choices {
				if c.Index != j || len(c.TokenIDs) != 6 {
					t.Fatalf("choice %d: %+v", j, c)
				}
				out = append(out, c.TokenIDs)
			}
			return out, v.Usage
		}
		first, usage := run()
		if usage["prompt_tokens"] != 40.0 || usage["completion_tokens"] != 24.0 {
			t.Fatalf("usage %v", usage)
		}
		distinct := map[string]bool{}
		for _, ids := range first {
			distinct[fmt.Sprint(ids)] = true
		}
		if len(distinct) < 2 {
			t.Fatalf("4 choices at temperature 1 are all %v", first[0])
		}
		// The three siblings took the two full prompt blocks from the prefix cache.
		deadline := time.Now().Add(5 * time.Second)
		for hits()-before < 3*32 {
			if time.Now().After(deadline) {
				t.Fatalf("prefix-hit tokens grew by %v, want >= 96", hits()-before)
			}
			time.Sleep(100 * time.Millisecond)
		}
		again, _ := run()
		for j := range first {
			if !slices.Equal(first[j], again[j]) {
				t.Fatalf("choice %d: %v then %v with the same seed", j, first[j], again[j])
			}
		}
		// Choice 0 is what n=1 with the same seed gives.
		single := generateWith(t, e, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 1,
			"seed": 42, "ignore_eos": true, "return_token_ids": true})
		if !slices.Equal(single, first[0]) {
			t.Fatalf("n=1 gave %v, choice 0 of n=4 %v", single, first[0])
		}
	})

	t.Run("streamed n=2 with logprobs: deltas only, exact usage on every chunk", func(t *testing.T) {
		body := map[string]any{"prompt": promptIDs, "max_tokens": 7, "temperature": 1, "seed": 9, "n": 2, "logprobs": 2,
			"ignore_eos": true, "return_token_ids": true}
		whole := map[int][]int32{}
		code, b := e.post("/v1/completions", body)
		var w struct {
			Choices []struct {
				Index    int     `json:"index"`
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if code != 200 || json.Unmarshal(b, &w) != nil {
			t.Fatalf("%d %s", code, b)
		}
		for _, c := range w.Choices {
			whole[c.Index] = c.TokenIDs
		}
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true, "continuous_usage_stats": true}
		events, err := e.sseEvents(context.Background(), "/v1/completions", body)
		if err != nil || len(events) == 0 || events[len(events)-1] != "[DONE]" {
			t.Fatalf("stream: %v %q", err, events)
		}
		got := map[int][]int32{}
		last := 0
		var final int
		for _, ev := range events[:len(events)-1] {
			var c struct {
				Choices []struct {
					Index    int     `json:"index"`
					TokenIDs []int32 `json:"token_ids"`
					Logprobs *struct {
						Tokens []string `json:"tokens"`
					} `json:"logprobs"`
				} `json:"choices"`
				Usage *struct {
					Prompt     int `json:"prompt_tokens"`
					Completion int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Usage == nil {
				t.Fatalf("chunk %s: %v", ev, err)
			}
			if len(c.Choices) == 0 {
				final = c.Usage.Completion
				continue
			}
			if len(c.Choices) != 1 {
				t.Fatalf("chunk with %d choices", len(c.Choices))
			}
			ch := c.Choices[0]
			got[ch.Index] = append(got[ch.Index], ch.TokenIDs...)
			if ch.Logprobs != nil && len(ch.Logprobs.Tokens) != len(ch.TokenIDs) {
				t.Fatalf("chunk: %d logprob tokens for %d ids", len(ch.Logprobs.Tokens), len(ch.TokenIDs))
			}
			n := len(got[0]) + len(got[1])
			if c.Usage.Prompt != len(promptIDs) || c.Usage.Completion < last || c.Usage.Completion > n {
				t.Fatalf("usage %+v after %d tokens streamed (previous %d)", *c.Usage, n, last)
			}
			last = c.Usage.Completion
		}
		if final != 14 || !slices.Equal(got[0], whole[0]) || !slices.Equal(got[1], whole[1]) {
			t.Fatalf("streamed %v (usage %d), whole %v", got, final, whole)
		}
	})

	t.Run("a batch of 3 prompts has exact usage", func(t *testing.T) {
		texts := []string{"def add(a, b):", "import os\n", "class Stack:"}
		wantPrompt := 0
		for _, txt := range texts {
			var tk struct {
				Count int `json:"count"`
			}
			code, b := e.post("/tokenize", map[string]any{"text": txt})
			if code != 200 || json.Unmarshal(b, &tk) != nil {
				t.Fatalf("/tokenize: %d %s", code, b)
			}
			wantPrompt += tk.Count
		}
		code, b := e.post("/v1/completions", map[string]any{"prompt": texts, "max_tokens": 5, "temperature": 0, "return_token_ids": true})
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		var v struct {
			Choices []struct {
				Index    int     `json:"index"`
				Text     string  `json:"text"`
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Total      int `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 3 {
			t.Fatalf("%s: %v", b, err)
		}
		gen := 0
		for i, c := range v.Choices {
			single := generateWith(t, e, "/v1/completions", map[string]any{"prompt": texts[i], "max_tokens": 5, "temperature": 0, "return_token_ids": true})
			if c.Index != i || !slices.Equal(c.TokenIDs, single) {
				t.Fatalf("choice %d: %+v, alone %v", i, c, single)
			}
			gen += len(c.TokenIDs)
		}
		if v.Usage.Prompt != wantPrompt || v.Usage.Completion != gen || v.Usage.Total != wantPrompt+gen {
			t.Fatalf("usage %+v, want prompt %d completion %d", v.Usage, wantPrompt, gen)
		}
	})

	t.Run("n=3 with a json_schema: each choice its own matcher", func(t *testing.T) {
		schema := map[string]any{"type": "object", "properties": map[string]any{"id": map[string]any{"type": "integer", "minimum": 0, "maximum": 999}},
			"required": []string{"id"}}
		code, b := e.post("/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "An id."}},
			"max_tokens": 24, "temperature": 1, "seed": 3, "n": 3,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}})
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		var v struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				Finish string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) != 3 {
			t.Fatalf("%s: %v", b, err)
		}
		for i, c := range v.Choices {
			var doc map[string]int
			if err := json.Unmarshal([]byte(c.Message.Content), &doc); err != nil || len(doc) != 1 || c.Finish != "stop" {
				t.Fatalf("choice %d: %q (%s): %v", i, c.Message.Content, c.Finish, err)
			}
		}
	})

	t.Run("models, version, 404", func(t *testing.T) {
		var m map[string]any
		if code := e.getJSON("/v1/models/pico", &m); code != 200 || m["id"] != "pico" {
			t.Fatalf("/v1/models/pico: %d %v", code, m)
		}
		var errBody struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		if code := e.getJSON("/v1/models/nope", &errBody); code != 404 || errBody.Error.Type != "not_found_error" {
			t.Fatalf("/v1/models/nope: %d %+v", code, errBody)
		}
		if code := e.getJSON("/v1/nothing", &errBody); code != 404 || errBody.Error.Type != "not_found_error" {
			t.Fatalf("/v1/nothing: %d %+v", code, errBody)
		}
		var ver map[string]string
		if code := e.getJSON("/version", &ver); code != 200 || ver["version"] == "" {
			t.Fatalf("/version: %d %v", code, ver)
		}
		for _, bin := range []string{"tokenizerd", "schedulerd", "detokd"} {
			out, err := exec.Command(filepath.Join(binDir, bin), "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), ver["version"]) {
				t.Fatalf("%s --version: %v %s", bin, err, out)
			}
		}
	})
}

// generateWith posts a non-streamed completion and returns its token ids.
func generateWith(t *testing.T, e *engine, path string, body map[string]any) []int32 {
	t.Helper()
	code, b := e.post(path, body)
	if code != 200 {
		t.Fatalf("%s: %d %s", path, code, b)
	}
	var v struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &v); err != nil || len(v.Choices) == 0 {
		t.Fatalf("%s: %s: %v", path, b, err)
	}
	return v.Choices[0].TokenIDs
}

// TestAPIExtensionsNodeClient runs e2e/node/api_ext.mjs (the official OpenAI Node client)
// against a real engine and checks what it read.
func TestAPIExtensionsNodeClient(t *testing.T) {
	out := runNodeClient(t, "api_ext.mjs")
	type usage struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
	}
	var res struct {
		StreamUsage usage `json:"streamUsage"`
		Streamed    map[string]struct {
			Content  string `json:"content"`
			Logprobs int    `json:"logprobs"`
			Tops     []int  `json:"tops"`
			Finish   string `json:"finish"`
		} `json:"streamed"`
		Whole []struct {
			Index    int    `json:"index"`
			Content  string `json:"content"`
			Logprobs int    `json:"logprobs"`
			BytesOK  bool   `json:"bytesOK"`
		} `json:"whole"`
		WholeUsage  usage `json:"wholeUsage"`
		Completions []struct {
			Index   int   `json:"index"`
			Tokens  int   `json:"tokens"`
			Top     []int `json:"top"`
			Offsets []int `json:"offsets"`
		} `json:"completions"`
		CompletionsUsage usage `json:"completionsUsage"`
		Response         struct {
			Status string         `json:"status"`
			Text   string         `json:"text"`
			Usage  map[string]any `json:"usage"`
		} `json:"response"`
		ResponseStream struct {
			Deltas       string         `json:"deltas"`
			Text         string         `json:"text"`
			TerminalText string         `json:"terminalText"`
			Status       string         `json:"status"`
			Usage        map[string]any `json:"usage"`
			First        string         `json:"first"`
			Last         string         `json:"last"`
		} `json:"responseStream"`
		ResponseJSON struct {
			Status string `json:"status"`
			Text   string `json:"text"`
		} `json:"responseJSON"`
		Model   string `json:"model"`
		Ignored string `json:"ignored"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	// Streamed n=3 equals the whole n=3 with the same seed, choice by choice; every token has
	// its logprob entry with 3 top entries.
	total := 0
	for _, w := range res.Whole {
		s := res.Streamed[fmt.Sprint(w.Index)]
		if s.Content != w.Content || s.Logprobs != w.Logprobs || s.Finish == "" || !w.BytesOK {
			t.Fatalf("choice %d: streamed %+v, whole %+v", w.Index, s, w)
		}
		for _, k := range s.Tops {
			if k != 3 {
				t.Fatalf("choice %d: top_logprobs sizes %v", w.Index, s.Tops)
			}
		}
		total += w.Logprobs
	}
	if len(res.Whole) != 3 || res.WholeUsage.Completion != total || res.StreamUsage != res.WholeUsage {
		t.Fatalf("whole %+v usage %+v, streamed usage %+v", res.Whole, res.WholeUsage, res.StreamUsage)
	}
	gen := 0
	for i, c := range res.Completions {
		if c.Index != i || len(c.Top) != c.Tokens || len(c.Offsets) != c.Tokens {
			t.Fatalf("completion %d: %+v", i, c)
		}
		for _, k := range c.Top {
			if k < 2 || k > 3 {
				t.Fatalf("completion %d: top sizes %v", i, c.Top)
			}
		}
		gen += c.Tokens
	}
	if len(res.Completions) != 2 || res.CompletionsUsage.Completion != gen {
		t.Fatalf("completions %+v usage %+v", res.Completions, res.CompletionsUsage)
	}
	if res.Response.Status == "" || res.Response.Usage["output_tokens"] == nil {
		t.Fatalf("response %+v", res.Response)
	}
	rs := res.ResponseStream
	if rs.Deltas != rs.Text || rs.Text != rs.TerminalText || rs.Text != res.Response.Text || rs.Status != res.Response.Status ||
		rs.First != "response.created" || rs.Last != "response."+map[string]string{"completed": "completed", "incomplete": "incomplete"}[rs.Status] ||
		rs.Usage["total_tokens"] != res.Response.Usage["total_tokens"] {
		t.Fatalf("streamed response %+v, whole %+v", rs, res.Response)
	}
	var doc struct {
		Name *string `json:"name"`
		Age  *int    `json:"age"`
	}
	if res.ResponseJSON.Status != "completed" || json.Unmarshal([]byte(res.ResponseJSON.Text), &doc) != nil || doc.Name == nil || doc.Age == nil {
		t.Fatalf("json_schema response %+v", res.ResponseJSON)
	}
	if res.Model != "pico" || res.Ignored != "user,metadata" {
		t.Fatalf("model %q, ignored %q", res.Model, res.Ignored)
	}
}

// TestLangChainClient runs e2e/node/langchain.mjs (LangChain's ChatOpenAI) against a real engine.
func TestLangChainClient(t *testing.T) {
	out := runNodeClient(t, "langchain.mjs")
	type usage struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
		Total  int `json:"total_tokens"`
	}
	var res struct {
		Invoke struct {
			Content string `json:"content"`
			Usage   usage  `json:"usage"`
		} `json:"invoke"`
		Stream struct {
			Content string `json:"content"`
			Usage   *usage `json:"usage"`
		} `json:"stream"`
		Logprobs   []int          `json:"logprobs"`
		N          int            `json:"n"`
		Structured map[string]int `json:"structured"`
		Responses  struct {
			Content string `json:"content"`
			Usage   usage  `json:"usage"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if res.Invoke.Content == "" || res.Stream.Content != res.Invoke.Content || res.Stream.Usage == nil || *res.Stream.Usage != res.Invoke.Usage {
		t.Fatalf("invoke %+v, stream %+v", res.Invoke, res.Stream)
	}
	if len(res.Logprobs) != res.Invoke.Usage.Output {
		t.Fatalf("logprobs %v for %d output tokens", res.Logprobs, res.Invoke.Usage.Output)
	}
	for _, k := range res.Logprobs {
		if k != 2 {
			t.Fatalf("top_logprobs sizes %v", res.Logprobs)
		}
	}
	if res.N != 3 || len(res.Structured) != 2 {
		t.Fatalf("n %d, structured %v", res.N, res.Structured)
	}
	if res.Responses.Content != res.Invoke.Content || res.Responses.Usage != res.Invoke.Usage {
		t.Fatalf("responses %+v, chat %+v", res.Responses, res.Invoke)
	}
}

// TestVercelAIClient runs e2e/node/vercel_ext.mjs (the Vercel AI SDK's OpenAI provider, on the
// Responses API by default) against a real engine.
func TestVercelAIClient(t *testing.T) {
	out := runNodeClient(t, "vercel_ext.mjs")
	type usage struct {
		Input  int `json:"inputTokens"`
		Output int `json:"outputTokens"`
		Total  int `json:"totalTokens"`
	}
	var res struct {
		Generate struct {
			Text   string `json:"text"`
			Usage  usage  `json:"usage"`
			Finish string `json:"finish"`
		} `json:"generate"`
		Stream struct {
			Text   string `json:"text"`
			Usage  usage  `json:"usage"`
			Finish string `json:"finish"`
		} `json:"stream"`
		Object map[string]int `json:"object"`
		Chat   struct {
			Text  string `json:"text"`
			Usage usage  `json:"usage"`
		} `json:"chat"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	g := res.Generate
	if g.Text == "" || res.Stream.Text != g.Text || res.Stream.Usage != g.Usage || g.Usage.Output == 0 || res.Stream.Finish != g.Finish {
		t.Fatalf("generate %+v, stream %+v", g, res.Stream)
	}
	if res.Chat.Text != g.Text || res.Chat.Usage != g.Usage || len(res.Object) != 2 {
		t.Fatalf("chat %+v vs responses %+v; object %v", res.Chat, g, res.Object)
	}
}
