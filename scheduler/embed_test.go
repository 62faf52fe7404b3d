package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
)

// poolRef is the reference vector of one prompt: the hidden states of one whole-prompt forward
// on a fresh backend, pooled here.
func poolRef(t *testing.T, b *cpu.Backend, prompt []int32, p Pooling) []float32 {
	t.Helper()
	var table []int32
	for i := range (len(prompt) + b.BlockSize() - 1) / b.BlockSize() {
		table = append(table, int32(i))
	}
	if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, BlockTable: table}}}); err != nil {
		t.Fatal(err)
	}
	rows, err := b.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := b.HiddenSize()
	out := make([]float32, h)
	switch p {
	case PoolingLast:
		copy(out, rows[len(rows)-h:])
	case PoolingCLS:
		copy(out, rows[:h])
	case PoolingMean:
		for r := range len(prompt) {
			for j := range h {
				out[j] += rows[r*h+j] / float32(len(prompt))
			}
		}
	}
	return out
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestEmbeddingsMatchForward runs embedding requests of every pooling through the scheduler
// on the real CPU backend, in small chunks and batched with a generation request, and compares
// each vector with the pooling of one whole-prompt forward; then repeats them, the last-token
// one now starting from cached blocks (the mean and CLS ones may not use the cache).
func TestEmbeddingsMatchForward(t *testing.T) {
	m, fx := loadQwen3(t)
	b, err := cpu.New(m, backend.Options{NumBlocks: 64, BlockSize: 4, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	refB, err := cpu.New(m, backend.Options{NumBlocks: 64, BlockSize: 4, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer refB.Close()
	s := newScheduler(t, b, Config{MaxRunning: 8, MaxPrefillTokens: 12, ChunkSize: 5, EOS: m.Generation.EOSTokenIDs,
		MaxModelLen: m.Config.MaxPositions})
	var prompt []int32
	for _, p := range fx.Prompts {
		prompt = append(prompt, p.InputIDs...)
	}
	prompt = prompt[:min(len(prompt), 23)]
	if len(prompt) < 12 {
		t.Fatalf("fixture prompts give only %d tokens", len(prompt))
	}
	poolings := []Pooling{PoolingLast, PoolingMean, PoolingCLS}
	want := map[Pooling][]float32{}
	for _, p := range poolings {
		want[p] = poolRef(t, refB, prompt, p)
	}
	results := map[string]*result{}
	for round := range 2 {
		mustAdd(t, s, &Request{RID: fmt.Sprintf("gen-%d", round), InputIDs: fx.Prompts[0].InputIDs, MaxNewTokens: 4, IgnoreEOS: true, Sampling: greedy()})
		for _, p := range poolings {
			mustAdd(t, s, &Request{RID: fmt.Sprintf("%v-%d", p, round), InputIDs: prompt, Pooling: p})
		}
		run(t, s, results, 200)
		checkDrained(t, s)
		for _, p := range poolings {
			r := results[fmt.Sprintf("%v-%d", p, round)]
			if r == nil || r.items != 1 || r.last.FinishReason != FinishStop || len(r.ids) != 0 {
				t.Fatalf("%v round %d: %+v", p, round, r)
			}
			if r.last.PromptTokens != len(prompt) || r.last.CompletionTokens != 0 {
				t.Errorf("%v round %d: prompt %d completion %d tokens", p, round, r.last.PromptTokens, r.last.CompletionTokens)
			}
			if d := maxAbsDiff(r.last.Embedding, want[p]); len(r.last.Embedding) != len(want[p]) || d > 1e-4 {
				t.Errorf("%v round %d: %d floats, max difference %.3g from the forward's pooling", p, round, len(r.last.Embedding), d)
			}
			cached := r.last.CachedTokens
			switch {
			case round == 1 && p == PoolingLast && cached == 0:
				t.Errorf("last-token pooling repeated found no cached prefix")
			case p != PoolingLast && cached != 0:
				t.Errorf("%v pooling used %d cached tokens", p, cached)
			}
		}
		if r := results[fmt.Sprintf("gen-%d", round)]; r == nil || len(r.ids) != 4 {
			t.Fatalf("the generation request beside them: %+v", r)
		}
	}
}

// TestEmbeddingRefused: what an embedding request may not carry, and a backend without hidden
// states, are refused at Add.
func TestEmbeddingRefused(t *testing.T) {
	m, _ := loadQwen3(t)
	b, err := cpu.New(m, backend.Options{NumBlocks: 4, BlockSize: 4, Tuning: cpu.Tuning{Threads: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := newScheduler(t, b, Config{MaxRunning: 2, MaxPrefillTokens: 8, MaxModelLen: 64})
	for name, c := range map[string]struct {
		req  Request
		want string
	}{
		"max tokens": {Request{RID: "a", InputIDs: []int32{1}, Pooling: PoolingLast, MaxNewTokens: 1}, "generates nothing"},
		"logprobs":   {Request{RID: "a", InputIDs: []int32{1}, Pooling: PoolingMean, PromptLogprobs: true}, "generates nothing"},
		"pool":       {Request{RID: "a", InputIDs: make([]int32, 17), Pooling: PoolingLast}, "KV blocks"},
		"context":    {Request{RID: "a", InputIDs: make([]int32, 65), Pooling: PoolingLast}, "context length"},
		"pooling":    {Request{RID: "a", InputIDs: []int32{1}, Pooling: 9}, "unknown pooling"},
	} {
		err := s.Add(&c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		} else if _, kind := Refusal(err); kind != ErrorInvalid {
			t.Errorf("%s: %v is %v, want the request's fault", name, err, kind)
		}
	}
	plain := newScheduler(t, &checkBatches{Backend: b, t: t}, Config{MaxRunning: 2, MaxPrefillTokens: 8, MaxModelLen: 64})
	err = plain.Add(&Request{RID: "a", InputIDs: []int32{1}, Pooling: PoolingLast})
	if _, kind := Refusal(err); !errors.Is(err, ErrNoHiddenStates) || kind != ErrorInvalid {
		t.Errorf("a backend without hidden states: %v (%v), want ErrNoHiddenStates as the request's fault", err, kind)
	}
}

// TestEmbeddingPreemptedRestarts: a mean-pooled embedding preempted mid-prompt (a decoding
// request beside it needs its KV blocks) restarts from its first token when re-admitted, so its
// vector still equals the whole-prompt forward's, not a sum that counts the first chunks twice.
func TestEmbeddingPreemptedRestarts(t *testing.T) {
	m, _ := loadQwen3(t)
	const bs = 4
	b, err := cpu.New(m, backend.Options{NumBlocks: 12, BlockSize: bs, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	refB, err := cpu.New(m, backend.Options{NumBlocks: 12, BlockSize: bs, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer refB.Close()
	s := newScheduler(t, b, Config{MaxRunning: 4, MaxPrefillTokens: 8, ChunkSize: 3, MaxModelLen: m.Config.MaxPositions})
	prompt := make([]int32, 40) // 10 blocks: with the decoding request's, more than the pool's 12
	for i := range prompt {
		prompt[i] = int32((i*37 + 5) % b.VocabSize())
	}
	mustAdd(t, s, &Request{RID: "gen", InputIDs: []int32{1, 2, 3, 4}, MaxNewTokens: 24, IgnoreEOS: true, Sampling: greedy()})
	mustAdd(t, s, &Request{RID: "emb", InputIDs: prompt, Pooling: PoolingMean})
	results := map[string]*result{}
	run(t, s, results, 500)
	checkDrained(t, s)
	r := results["emb"]
	if r == nil || r.last.FinishReason != FinishStop {
		t.Fatalf("embedding: %+v", r)
	}
	if r.last.Preemptions == 0 {
		t.Fatalf("the embedding was never preempted (stats %+v): the test does not test the restart", s.Stats())
	}
	if d := maxAbsDiff(r.last.Embedding, poolRef(t, refB, prompt, PoolingMean)); d > 1e-4 {
		t.Errorf("after %d preemptions the mean differs from the forward's by %.3g", r.last.Preemptions, d)
	}
}
