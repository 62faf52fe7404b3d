package scheduler

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/sampling"
)

// TestPromptLogprobs: a request asking for prompt logprobs gets, on its first item, the logprob
// and top 3 of every prompt token after the first, equal to the last-position logits of a
// forward over each prefix alone, although its prompt is chunked and was cached by an earlier
// request (which it must not reuse).
func TestPromptLogprobs(t *testing.T) {
	m, fx := loadQwen3(t)
	prompt := fx.Prompts[0].InputIDs
	for _, p := range fx.Prompts {
		if len(p.InputIDs) > len(prompt) {
			prompt = p.InputIDs
		}
	}
	b, err := cpu.New(m, backend.Options{NumBlocks: 64, BlockSize: 4, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newScheduler(t, b, Config{MaxRunning: 4, MaxPrefillTokens: 16, ChunkSize: 8, MaxModelLen: m.Config.MaxPositions})
	var first Item
	runOne := func(req *Request) {
		mustAdd(t, s, req)
		got := false
		for s.HasWork() {
			out, err := s.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range out.Items {
				if it.RID == req.RID && !got && len(it.NewIDs) > 0 {
					got = true
					first = it
					first.PromptLogprobs = slices.Clone(it.PromptLogprobs)
					first.PromptTopLogprobIDs = slices.Clone(it.PromptTopLogprobIDs)
					first.PromptTopLogprobs = slices.Clone(it.PromptTopLogprobs)
				} else if len(it.PromptLogprobs) > 0 {
					t.Fatalf("%s: prompt logprobs on a later item", it.RID)
				}
			}
		}
	}
	runOne(&Request{RID: "warm", InputIDs: prompt, MaxNewTokens: 2, IgnoreEOS: true, Sampling: greedy()})
	runOne(&Request{RID: "scored", InputIDs: prompt, MaxNewTokens: 2, IgnoreEOS: true, Sampling: greedy(),
		PromptLogprobs: true, TopLogprobs: 3})
	n := len(prompt)
	if first.CachedTokens != 0 || len(first.PromptLogprobs) != n-1 || len(first.PromptTopLogprobIDs) != 3*(n-1) {
		t.Fatalf("cached %d, %d prompt logprobs and %d top entries for a %d-token prompt",
			first.CachedTokens, len(first.PromptLogprobs), len(first.PromptTopLogprobIDs), n)
	}
	ref, err := cpu.New(m, backend.Options{NumBlocks: 64, BlockSize: 4, Tuning: cpu.Tuning{Threads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	table := make([]int32, (n+3)/4)
	for i := range table {
		table[i] = int32(i)
	}
	for p := 1; p < n; p++ {
		rows, err := ref.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[:p], BlockTable: table, Logits: true}}})
		if err != nil {
			t.Fatal(err)
		}
		want := sampling.LogSoftmaxAt(rows[0], prompt[p])
		if got := first.PromptLogprobs[p-1]; math.Abs(float64(got-want)) > 1e-4 {
			t.Fatalf("prompt token %d: logprob %v, a forward over the prefix gives %v", p, got, want)
		}
		ids, _ := sampling.TopLogprobs(rows[0], 3, nil, nil)
		if got := first.PromptTopLogprobIDs[3*(p-1) : 3*p]; !slices.Equal(got, ids) {
			t.Fatalf("prompt token %d: top %v, want %v", p, got, ids)
		}
	}
}
