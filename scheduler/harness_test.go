package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/sampling"
)

func greedy() sampling.Params {
	p := sampling.DefaultParams()
	p.Temperature = 0
	return p
}

func newReplay(t testing.TB, vocab, blocks, bs int) *replay.Runner {
	t.Helper()
	r, err := replay.New(replay.Options{VocabSize: vocab, NumBlocks: blocks, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func newScheduler(t testing.TB, b backend.Backend, cfg Config) *Scheduler {
	t.Helper()
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = 4096
	}
	s, err := New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAdd(t testing.TB, s *Scheduler, req *Request) {
	t.Helper()
	if err := s.Add(req); err != nil {
		t.Fatal(err)
	}
}

// result is what a client of one request saw across all steps.
type result struct {
	ids      []int32
	logprobs []float32
	topIDs   []int32
	topLps   []float32
	last     Item
	items    int
}

// checkBatches observes every batch the scheduler sends (it forwards to the real backend) and
// fails the test on a broken invariant: a step over the token budget, a prefill chunk over the
// chunk size, or two sequences writing into the same KV block in one step.
type checkBatches struct {
	backend.Backend
	t           testing.TB
	budget      int
	chunk       int
	maxTokens   int // the largest step seen
	prefillSeqs int // sequences whose chunk was a partial prompt
}

func (c *checkBatches) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	tokens, decodes := 0, 0
	written := map[int32]int{}
	bs := c.BlockSize()
	for i, sq := range b.Seqs {
		tokens += len(sq.Tokens)
		if len(sq.Tokens) == 1 {
			decodes++
		} else if len(sq.Tokens) > c.chunk {
			c.t.Errorf("seq %d: chunk of %d tokens, chunk size %d", i, len(sq.Tokens), c.chunk)
		}
		if !sq.Logits {
			c.prefillSeqs++
		}
		for blk := sq.Pos / bs; blk <= (sq.Pos+len(sq.Tokens)-1)/bs; blk++ {
			id := sq.BlockTable[blk]
			if j, dup := written[id]; dup {
				c.t.Errorf("seqs %d and %d both write block %d in one step", j, i, id)
			}
			written[id] = i
		}
	}
	if tokens > max(c.budget, decodes) {
		c.t.Errorf("step of %d tokens (%d decodes), budget %d", tokens, decodes, c.budget)
	}
	c.maxTokens = max(c.maxTokens, tokens)
	return c.Backend.Forward(ctx, b)
}

// run steps s until it has no work, checking the streaming promises on every item: deltas only,
// CompletionTokens equal to the ids delivered so far, nothing after a finish.
func run(t testing.TB, s *Scheduler, results map[string]*result, maxSteps int) {
	t.Helper()
	for step := 0; s.HasWork(); step++ {
		if step == maxSteps {
			t.Fatalf("still working after %d steps; load %+v", maxSteps, s.Load())
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		collect(t, out, results)
	}
}

func collect(t testing.TB, out Output, results map[string]*result) {
	t.Helper()
	collectN(t, out, results, 1)
}

// collectN is collect for steps that may emit up to maxIDs ids per request (speculative
// decoding); it also keeps the top logprobs.
func collectN(t testing.TB, out Output, results map[string]*result, maxIDs int) {
	t.Helper()
	seen := map[string]bool{}
	for _, it := range out.Items {
		if seen[it.RID] {
			t.Fatalf("two items for %s in one step", it.RID)
		}
		seen[it.RID] = true
		r := results[it.RID]
		if r == nil {
			r = &result{}
			results[it.RID] = r
		}
		if r.last.Finished {
			t.Fatalf("%s: item after its finish: %+v", it.RID, it)
		}
		if len(it.NewIDs) > maxIDs {
			t.Fatalf("%s: %d ids in one step", it.RID, len(it.NewIDs))
		}
		if len(it.NewIDs) == 0 && !it.Finished {
			t.Fatalf("%s: item with no ids and no finish", it.RID)
		}
		r.ids = append(r.ids, it.NewIDs...)
		r.logprobs = append(r.logprobs, it.Logprobs...)
		r.topIDs = append(r.topIDs, it.TopLogprobIDs...)
		r.topLps = append(r.topLps, it.TopLogprobs...)
		if it.CompletionTokens != len(r.ids) {
			t.Fatalf("%s: CompletionTokens %d after %d ids", it.RID, it.CompletionTokens, len(r.ids))
		}
		if it.Finished != (it.FinishReason != FinishNone) {
			t.Fatalf("%s: Finished %v with reason %v", it.RID, it.Finished, it.FinishReason)
		}
		r.last = it
		r.items++
	}
}

// checkDrained asserts exact KV accounting once every request is gone.
func checkDrained(t testing.TB, s *Scheduler) {
	t.Helper()
	l := s.Load()
	if l.Running != 0 || l.Waiting != 0 || l.KVTokensUsed != 0 {
		t.Fatalf("load after all requests finished: %+v", l)
	}
	p := s.pool
	if p.available() != p.numBlocks() {
		t.Fatalf("%d of %d blocks available", p.available(), p.numBlocks())
	}
	for b, r := range p.ref {
		if r != 0 {
			t.Fatalf("block %d has %d references", b, r)
		}
	}
	n := 0
	for b := p.head; b >= 0; b = p.next[b] {
		n++
		if !p.hashed[b] {
			t.Fatalf("unhashed block %d in the LRU", b)
		}
	}
	if n != p.cached || n+len(p.free) != p.numBlocks() || len(p.byHash) != n {
		t.Fatalf("LRU holds %d (counted %d), free %d, hashed %d, pool %d", n, p.cached, len(p.free), len(p.byHash), p.numBlocks())
	}
	if len(s.byRID) != 0 {
		t.Fatalf("%d requests still tracked", len(s.byRID))
	}
}

// prompt returns a deterministic prompt of n tokens.
func prompt(seed, n, vocab int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*7919 + i*104729 + i*i) % vocab)
	}
	return p
}

func rid(i int) string { return fmt.Sprintf("r%d", i) }

func wantIDs(t testing.TB, what string, got, want []int32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}
