package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSeededAloneEqualsConcurrent: a seeded request's tokens do not depend on what it is
// batched with. The request of the report (pico, "def parse_args(argv):\n", 96 tokens at
// temperature 1, seed 5) is sent alone, then three times with 15 concurrent others (copies of
// itself arriving at once and decoding beside it, and long prompts arriving later that prefill
// while it decodes); it and every copy must produce the same token ids as alone.
func TestSeededAloneEqualsConcurrent(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 2})
	target := map[string]any{"model": "pico", "prompt": "def parse_args(argv):\n", "max_tokens": 96, "temperature": 1, "seed": 5,
		"ignore_eos": true, "return_token_ids": true, "logprobs": 0}
	// A sampled token changes only when a perturbed logit moves a draw across a boundary, which
	// is rare per step; the chosen tokens' logprobs expose any difference in the logits at every
	// step, so they must match too (as the JSON the server wrote them).
	type result = seededResult
	complete := func(body map[string]any) (result, error) { return seededCompletion(e, body, false) }
	same := func(a, b result) bool { return slices.Equal(a.ids, b.ids) && a.logprobs == b.logprobs }
	alone, err := complete(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(alone.ids) != 96 || alone.logprobs == "" {
		t.Fatalf("alone: %d tokens, logprobs %q; want 96 and their logprobs", len(alone.ids), alone.logprobs)
	}
	if again, err := complete(target); err != nil || !same(again, alone) {
		t.Fatalf("the same request alone twice differs (%v):\n%v\n%v", err, alone, again)
	}
	long := strings.Repeat("import os\nimport sys\nfrom typing import List, Optional\n", 6)
	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		start := make(chan struct{})
		for i := range 15 {
			wg.Go(func() {
				<-start
				if i%4 == 3 {
					// Long prompts arriving while the copies decode, so their prefills share
					// the copies' steps.
					time.Sleep(time.Duration(30*(i+round)) * time.Millisecond)
					body := map[string]any{"model": "pico", "prompt": long + fmt.Sprintf("def f%d(x):\n", i), "max_tokens": 60 + 5*i,
						"temperature": 1, "seed": 100 + i, "ignore_eos": true}
					if _, err := complete(body); err != nil {
						errs <- fmt.Errorf("companion %d: %w", i, err)
					}
					return
				}
				// Copies of the request itself: each is one seeded request among others.
				got, err := complete(target)
				if err != nil {
					errs <- fmt.Errorf("copy %d: %w", i, err)
				} else if !same(got, alone) {
					errs <- fmt.Errorf("round %d: copy %d differs from the request alone:\nalone %v\n%s\ncopy  %v\n%s", round, i, alone.ids, alone.logprobs, got.ids, got.logprobs)
				}
			})
		}
		var got result
		wg.Go(func() {
			<-start
			var err error
			if got, err = complete(target); err != nil {
				errs <- err
			}
		})
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if !same(got, alone) {
			n := 0
			for n < min(len(got.ids), len(alone.ids)) && got.ids[n] == alone.ids[n] {
				n++
			}
			t.Fatalf("round %d: beside 15 concurrent requests the seeded request differs (tokens equal up to %d of %d):\nalone      %v\n%s\nconcurrent %v\n%s",
				round, n, len(alone.ids), alone.ids, alone.logprobs, got.ids, got.logprobs)
		}
	}
}

// TestSeededChunkingAloneEqualsBeside: a seeded request's tokens and logprobs do not depend on how
// its prompt is cut into prefill chunks. With a 48-token step budget, the request alone prefills
// in chunks of 48; sent right after a long companion on a second engine, it gets what budget the
// companion's prefill leaves (other cuts, its chunks beside the companion's); sent again on each
// engine it starts from a prefix-cache hit on the blocks its prompt rows wrote. All four must
// give the same ids and logprobs. That is what --deterministic promises (without it a prompt's
// rows depend on its chunks' lengths).
func TestSeededChunkingAloneEqualsBeside(t *testing.T) {
	opts := engineOpts{schedArgs: []string{"--max-prefill-tokens", "48", "--deterministic"}}
	prompt := strings.Repeat("def load(path):\n    with open(path) as f:\n        return f.read()\n", 9) + "def parse_args(argv):\n"
	target := map[string]any{"model": "pico", "prompt": prompt, "max_tokens": 32, "temperature": 1, "seed": 9,
		"ignore_eos": true, "return_token_ids": true, "logprobs": 0}
	companion := map[string]any{"model": "pico", "prompt": strings.Repeat("import os\nimport sys\nfrom typing import List, Optional\n", 20),
		"max_tokens": 8, "temperature": 1, "seed": 3, "ignore_eos": true, "logprobs": 0}
	type result = seededResult
	complete := func(e *engine, body map[string]any) (result, error) { return seededCompletion(e, body, true) }
	check := func(what string, got, want result) {
		t.Helper()
		if !slices.Equal(got.ids, want.ids) || got.logprobs != want.logprobs {
			t.Fatalf("%s differs from the request alone:\nalone %v\n%s\ngot   %v\n%s", what, want.ids, want.logprobs, got.ids, got.logprobs)
		}
	}
	a := startEngine(t, opts)
	alone, err := complete(a, target)
	if err != nil {
		t.Fatal(err)
	}
	if alone.prompt < 3*48 || len(alone.ids) != 32 {
		t.Fatalf("alone: %d prompt tokens and %d generated; want several 48-token chunks and 32", alone.prompt, len(alone.ids))
	}
	again, err := complete(a, target)
	if err != nil {
		t.Fatal(err)
	}
	check("alone again (a prefix-cache hit)", again, alone)

	b := startEngine(t, opts)
	var wg sync.WaitGroup
	var beside result
	var besideErr, compErr error
	wg.Go(func() { _, compErr = complete(b, companion) })
	wg.Go(func() {
		time.Sleep(5 * time.Millisecond) // after the companion, so they share the budget
		beside, besideErr = complete(b, target)
	})
	wg.Wait()
	if compErr != nil || besideErr != nil {
		t.Fatalf("companion: %v; target: %v", compErr, besideErr)
	}
	check("beside a long prefill", beside, alone)
	again, err = complete(b, target)
	if err != nil {
		t.Fatal(err)
	}
	check("after a prefix-cache hit on the blocks written beside the companion", again, alone)
}

// seededResult is what the seeded-invariance tests compare of a completion: its token ids, the
// chosen tokens' logprobs as the JSON the server wrote them (a sampled token changes only when a
// perturbed logit moves a draw across a boundary; the logprobs expose any difference at every
// step), and the prompt's length in tokens.
type seededResult struct {
	ids      []int32
	logprobs string
	prompt   int
}

// seededCompletion posts body to e's /v1/completions and returns what the seeded-invariance
// tests compare; with wantLogprobs a response without logprobs is an error.
func seededCompletion(e *engine, body map[string]any, wantLogprobs bool) (seededResult, error) {
	b, _ := json.Marshal(body)
	code, out := e.postRaw("/v1/completions", string(b))
	if code != 200 {
		return seededResult{}, fmt.Errorf("status %d: %s", code, out)
	}
	var r struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs *struct {
				TokenLogprobs json.RawMessage `json:"token_logprobs"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Choices) != 1 || wantLogprobs && r.Choices[0].Logprobs == nil {
		return seededResult{}, fmt.Errorf("response %s: %v", out, err)
	}
	res := seededResult{ids: r.Choices[0].TokenIDs, prompt: r.Usage.PromptTokens}
	if lp := r.Choices[0].Logprobs; lp != nil {
		res.logprobs = string(lp.TokenLogprobs)
	}
	return res, nil
}
