package scheduler

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/sampling"
)

func TestDeltasConcatenateToReplaySequence(t *testing.T) {
	const vocab = 500
	s := newScheduler(t, newReplay(t, vocab, 64, 4), Config{MaxRunning: 8, MaxPrefillTokens: 64})
	lens := []int{1, 3, 4, 5, 17}
	for i, n := range lens {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, n, vocab), MaxNewTokens: 20, Sampling: greedy()})
	}
	results := map[string]*result{}
	run(t, s, results, 100)
	for i, n := range lens {
		r := results[rid(i)]
		wantIDs(t, rid(i), r.ids, replay.Continuation(vocab, prompt(i, n, vocab), 20))
		if r.last.FinishReason != FinishLength || r.last.PromptTokens != n || r.last.MatchedStopToken != -1 {
			t.Errorf("%s: finish %+v", rid(i), r.last)
		}
		if r.items != 20 {
			t.Errorf("%s: %d items, want one per token", rid(i), r.items)
		}
	}
	checkDrained(t, s)
}

// TestTightBudgetAndCacheForceChunkingAndPreemption runs many requests, some arriving while
// others run, through a small token budget and a KV cache far smaller than their total need:
// prompts are chunked, requests are preempted and recomputed, and every output must still be
// exactly the replay sequence, with the cache fully accounted for at the end.
func TestTightBudgetAndCacheForceChunkingAndPreemption(t *testing.T) {
	const vocab, bs, budget, chunk = 1000, 4, 16, 8
	chk := &checkBatches{Backend: newReplay(t, vocab, 40, bs), t: t, budget: budget, chunk: chunk}
	s := newScheduler(t, chk, Config{MaxRunning: 8, MaxPrefillTokens: budget, ChunkSize: chunk})
	rng := rand.New(rand.NewPCG(1, 2))
	type spec struct{ plen, gen int }
	specs := make([]spec, 40)
	for i := range specs {
		specs[i] = spec{1 + rng.IntN(60), 1 + rng.IntN(50)}
	}
	results := map[string]*result{}
	next := 0
	for step := 0; next < len(specs) || s.HasWork(); step++ {
		if step > 5000 {
			t.Fatalf("no progress; load %+v", s.Load())
		}
		// A few arrivals every step.
		for k := 0; k < 2 && next < len(specs); k++ {
			mustAdd(t, s, &Request{RID: rid(next), InputIDs: prompt(next, specs[next].plen, vocab), MaxNewTokens: specs[next].gen, Sampling: greedy()})
			next++
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if l := out.Load; l.KVTokensUsed > l.KVTokensCapacity || l.Running > 8 {
			t.Fatalf("step %d: load %+v", step, l)
		}
		collect(t, out, results)
	}
	for i, sp := range specs {
		r := results[rid(i)]
		if r == nil || !r.last.Finished {
			t.Fatalf("%s did not finish", rid(i))
		}
		wantIDs(t, rid(i), r.ids, replay.Continuation(vocab, prompt(i, sp.plen, vocab), sp.gen))
	}
	st := s.Stats()
	if st.Preemptions == 0 || chk.prefillSeqs == 0 {
		t.Errorf("want preemption and chunked prefill: stats %+v, %d partial chunks", st, chk.prefillSeqs)
	}
	t.Logf("stats %+v; largest step %d tokens", st, chk.maxTokens)
	checkDrained(t, s)
}

func TestAbortFreesBlocksWithinOneStep(t *testing.T) {
	const vocab = 300
	s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 2, MaxPrefillTokens: 64})
	for i := range 3 {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 10, vocab), MaxNewTokens: 30, Sampling: greedy()})
	}
	results := map[string]*result{}
	for range 3 {
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		collect(t, out, results)
	}
	before := s.Load()
	if before.Running != 2 || before.Waiting != 1 {
		t.Fatalf("load %+v, want 2 running, 1 waiting", before)
	}
	if !s.Abort(rid(0)) || !s.Abort(rid(2)) {
		t.Fatal("Abort of live requests reported false")
	}
	if s.Abort(rid(0)) || s.Abort("nobody") {
		t.Fatal("Abort of a gone request reported true")
	}
	after := s.Load()
	// r0 held 3 blocks (12 positions computed): freed at once.
	if after.Running != 1 || after.Waiting != 0 || after.KVTokensUsed != before.KVTokensUsed-3*4 {
		t.Fatalf("load %+v after abort, before %+v", after, before)
	}
	out, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	collect(t, out, results)
	for _, id := range []string{rid(0), rid(2)} {
		r := results[id]
		if r == nil || !r.last.Finished || r.last.FinishReason != FinishAbort {
			t.Fatalf("%s: last item %+v, want an abort finish", id, r)
		}
	}
	if n := len(results[rid(0)].ids); n != 3 || results[rid(0)].last.CompletionTokens != 3 {
		t.Errorf("aborted r0 delivered %d ids, finish says %d", n, results[rid(0)].last.CompletionTokens)
	}
	run(t, s, results, 100)
	wantIDs(t, rid(1), results[rid(1)].ids, replay.Continuation(vocab, prompt(1, 10, vocab), 30))
	checkDrained(t, s)
	// The id is free again.
	mustAdd(t, s, &Request{RID: rid(0), InputIDs: []int32{1}, MaxNewTokens: 1, Sampling: greedy()})
}

func TestPrefixReuse(t *testing.T) {
	const vocab, bs = 700, 4
	s := newScheduler(t, newReplay(t, vocab, 64, bs), Config{MaxRunning: 4, MaxPrefillTokens: 32})
	base := prompt(1, 40, vocab)
	results := map[string]*result{}
	mustAdd(t, s, &Request{RID: "a", InputIDs: base, MaxNewTokens: 10, Sampling: greedy()})
	run(t, s, results, 100)
	if results["a"].last.CachedTokens != 0 {
		t.Fatalf("first request reports %d cached tokens", results["a"].last.CachedTokens)
	}
	checkDrained(t, s)

	// Same prompt: every full block but the one holding the last token comes from the cache.
	// Same first 22 tokens: 5 blocks. A prompt extending a's output reuses its generated blocks.
	branch := append(slices.Clone(base[:22]), prompt(2, 10, vocab)...)
	extended := append(slices.Clone(base), results["a"].ids[:9]...)
	mustAdd(t, s, &Request{RID: "b", InputIDs: base, MaxNewTokens: 10, Sampling: greedy()})
	mustAdd(t, s, &Request{RID: "c", InputIDs: branch, MaxNewTokens: 10, Sampling: greedy()})
	mustAdd(t, s, &Request{RID: "d", InputIDs: extended, MaxNewTokens: 5, Sampling: greedy()})
	run(t, s, results, 100)
	for _, c := range []struct {
		rid    string
		prompt []int32
		cached int
	}{{"b", base, 36}, {"c", branch, 20}, {"d", extended, 48}} {
		r := results[c.rid]
		if r.last.CachedTokens != c.cached {
			t.Errorf("%s: CachedTokens %d, want %d", c.rid, r.last.CachedTokens, c.cached)
		}
		wantIDs(t, c.rid, r.ids, replay.Continuation(vocab, c.prompt, len(r.ids)))
	}
	wantIDs(t, "b vs a", results["b"].ids, results["a"].ids)
	if s.Stats().PrefixHitTokens != 36+20+48 {
		t.Errorf("PrefixHitTokens %d", s.Stats().PrefixHitTokens)
	}
	checkDrained(t, s)

	// Requests that need the whole cache evict the cached prefixes, and accounting stays exact.
	for i := range 4 {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(10+i, 60, vocab), MaxNewTokens: 4, Sampling: greedy()})
	}
	run(t, s, results, 200)
	for i := range 4 {
		wantIDs(t, rid(i), results[rid(i)].ids, replay.Continuation(vocab, prompt(10+i, 60, vocab), 4))
	}
	checkDrained(t, s)
	mustAdd(t, s, &Request{RID: "e", InputIDs: base, MaxNewTokens: 10, Sampling: greedy()})
	run(t, s, results, 100)
	wantIDs(t, "e", results["e"].ids, results["a"].ids)
	checkDrained(t, s)

	// Identical new prompts prefilled side by side compute the same blocks twice; one copy is
	// cached, the other freed, and both outputs are right.
	twin := prompt(77, 30, vocab)
	mustAdd(t, s, &Request{RID: "t1", InputIDs: twin, MaxNewTokens: 5, Sampling: greedy()})
	mustAdd(t, s, &Request{RID: "t2", InputIDs: twin, MaxNewTokens: 5, Sampling: greedy()})
	run(t, s, results, 100)
	for _, id := range []string{"t1", "t2"} {
		wantIDs(t, id, results[id].ids, replay.Continuation(vocab, twin, 5))
	}
	checkDrained(t, s)
}

// TestFinishReasonsMatchTheWire: the binary converts FinishReason to ipc.FinishReason by value.
func TestFinishReasonsMatchTheWire(t *testing.T) {
	for r, want := range map[FinishReason]string{FinishNone: "none", FinishStop: "stop", FinishLength: "length",
		FinishAbort: "abort", FinishError: "error", 9: "FinishReason(9)"} {
		if r.String() != want {
			t.Errorf("%d: %q, want %q", r, r.String(), want)
		}
		if r != FinishNone && r <= FinishError && ipc.FinishReason(r).String() != want {
			t.Errorf("%d is %q here but %q on the wire", r, want, ipc.FinishReason(r).String())
		}
	}
}

// TestStopConditions covers each way a request ends, on the replay sequence of one prompt.
func TestStopConditions(t *testing.T) {
	const vocab = 400
	p := prompt(3, 9, vocab)
	cont := replay.Continuation(vocab, p, 40)
	// first returns the index of the first occurrence of cont[i].
	first := func(i int) int { return slices.Index(cont, cont[i]) }
	eosAt, stopAt := first(3), first(6)
	if eosAt == stopAt {
		t.Fatal("pick other positions: EOS and stop id coincide")
	}
	cases := []struct {
		name   string
		eos    []int32
		req    Request
		n      int // ids generated
		reason FinishReason
		tok    int32
		str    string
	}{
		{"max_new_tokens", nil, Request{MaxNewTokens: 7}, 7, FinishLength, -1, ""},
		{"eos", []int32{cont[eosAt]}, Request{MaxNewTokens: 30}, eosAt + 1, FinishStop, cont[eosAt], ""},
		{"eos among several", []int32{vocab - 1, cont[eosAt]}, Request{MaxNewTokens: 30}, eosAt + 1, FinishStop, cont[eosAt], ""},
		{"ignore_eos", []int32{cont[eosAt]}, Request{MaxNewTokens: 30, IgnoreEOS: true}, 30, FinishLength, -1, ""},
		{"stop token id", nil, Request{MaxNewTokens: 30, StopTokenIDs: []int32{cont[stopAt]}}, stopAt + 1, FinishStop, cont[stopAt], ""},
		{"stop id despite ignore_eos", nil, Request{MaxNewTokens: 30, IgnoreEOS: true, StopTokenIDs: []int32{cont[stopAt]}}, stopAt + 1, FinishStop, cont[stopAt], ""},
		{"stop string", nil, Request{MaxNewTokens: 30, StopCheck: matchAt(cont[5], "five")}, first(5) + 1, FinishStop, -1, "five"},
		{"context length", nil, Request{MaxNewTokens: 30}, 12, FinishLength, -1, ""},
		{"max_new_tokens 0", nil, Request{MaxNewTokens: 0}, 0, FinishLength, -1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			maxLen := 4096
			if c.name == "context length" {
				maxLen = len(p) + 30
				c.req.MaxNewTokens = 30
			}
			s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 2, MaxPrefillTokens: 16, EOS: c.eos, MaxModelLen: maxLen})
			req := c.req
			req.RID, req.InputIDs, req.Sampling = "x", p, greedy()
			mustAdd(t, s, &req)
			results := map[string]*result{}
			run(t, s, results, 100)
			r := results["x"]
			if c.name == "context length" {
				// Exactly at the limit is allowed and ends by length; one more is refused.
				c.n = 30
				req2 := req
				req2.RID, req2.MaxNewTokens = "y", 31
				if err := s.Add(&req2); err == nil || !strings.Contains(err.Error(), "context length") {
					t.Errorf("over the context: %v", err)
				}
			}
			wantIDs(t, "ids", r.ids, cont[:c.n])
			if r.last.FinishReason != c.reason || r.last.MatchedStopToken != c.tok || r.last.MatchedStop != c.str {
				t.Errorf("finish %v token %d stop %q; want %v %d %q", r.last.FinishReason, r.last.MatchedStopToken, r.last.MatchedStop, c.reason, c.tok, c.str)
			}
			checkDrained(t, s)
		})
	}
}

// matchAt is a StopCheck that matches stop string str when token tok is generated, like the
// binary's incremental decoder would when tok completes the string.
func matchAt(tok int32, str string) func([]int32) (string, bool) {
	return func(ids []int32) (string, bool) {
		if len(ids) != 1 {
			panic("StopCheck wants one new id per step")
		}
		return str, ids[0] == tok
	}
}

// TestMinNewTokens: EOS, stop ids and stop strings cannot end a request before MinNewTokens,
// and EOS and stop ids are masked out until then (the sampler takes the next best token).
func TestMinNewTokens(t *testing.T) {
	const vocab, minNew = 400, 6
	p := prompt(4, 5, vocab)
	cont := replay.Continuation(vocab, p, 40)
	for _, c := range []struct {
		name string
		eos  []int32
		req  Request
	}{
		{"eos", []int32{cont[1]}, Request{}},
		{"stop id", nil, Request{StopTokenIDs: []int32{cont[1]}}},
		{"stop string", nil, Request{StopCheck: matchAt(cont[1], "s")}},
		{"constraint", []int32{cont[1]}, Request{Constraint: &allowSet{vocab: vocab, terminable: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 2, MaxPrefillTokens: 16, EOS: c.eos})
			req := c.req
			req.RID, req.InputIDs, req.Sampling, req.MaxNewTokens, req.MinNewTokens = "x", p, greedy(), 30, minNew
			mustAdd(t, s, &req)
			results := map[string]*result{}
			run(t, s, results, 100)
			r := results["x"]
			if len(r.ids) < minNew {
				t.Fatalf("stopped after %d ids, min_new_tokens %d: %+v", len(r.ids), minNew, r.last)
			}
			stopTok := cont[1]
			if c.name != "stop string" && slices.Contains(r.ids[:minNew], stopTok) {
				t.Errorf("masked token %d generated early: %v", stopTok, r.ids)
			}
			if c.name == "stop string" {
				// Not masked: the sequence is unchanged, and the match at index 1 was ignored.
				wantIDs(t, "ids", r.ids[:minNew], cont[:minNew])
			}
			if r.last.FinishReason == FinishStop && len(r.ids) <= minNew && c.name != "stop string" {
				t.Errorf("stop token ended the request at %d ids", len(r.ids))
			}
			checkDrained(t, s)
		})
	}
}

func TestAddValidation(t *testing.T) {
	const vocab = 100
	s := newScheduler(t, newReplay(t, vocab, 8, 4), Config{MaxRunning: 2, MaxPrefillTokens: 16, MaxModelLen: 64})
	ok := func() *Request {
		return &Request{RID: "a", InputIDs: []int32{1, 2}, MaxNewTokens: 4, Sampling: greedy()}
	}
	mustAdd(t, s, ok())
	badSampling := ok()
	badSampling.RID, badSampling.Sampling.TopP = "b", 0
	// The engine's own ids are its fault; the rest is the request's, and its reason is what the
	// client reads, without the engine's id Add wraps around it for the rank's log.
	cases := []struct {
		req  *Request
		want string
		kind ErrorKind
	}{
		{nil, "nil request", ErrorInternal},
		{ok(), "already running", ErrorInternal},
		{&Request{RID: "", InputIDs: []int32{1}, MaxNewTokens: 1, Sampling: greedy()}, "empty request id", ErrorInternal},
		{&Request{RID: "b", MaxNewTokens: 1, Sampling: greedy()}, "empty prompt", ErrorInvalid},
		{&Request{RID: "b", InputIDs: []int32{1, vocab}, MaxNewTokens: 1, Sampling: greedy()}, "outside the vocabulary", ErrorInvalid},
		{&Request{RID: "b", InputIDs: []int32{-1}, MaxNewTokens: 1, Sampling: greedy()}, "outside the vocabulary", ErrorInvalid},
		{&Request{RID: "b", InputIDs: []int32{1}, MaxNewTokens: -1, Sampling: greedy()}, ">= 0", ErrorInvalid},
		{&Request{RID: "b", InputIDs: []int32{1}, MaxNewTokens: 2, MinNewTokens: 3, Sampling: greedy()}, "exceeds max_new_tokens", ErrorInvalid},
		{&Request{RID: "b", InputIDs: make([]int32, 60), MaxNewTokens: 5, Sampling: greedy()}, "context length", ErrorInvalid},
		{&Request{RID: "b", InputIDs: make([]int32, 30), MaxNewTokens: 5, Sampling: greedy()}, "KV blocks", ErrorInvalid},
		{badSampling, "top_p", ErrorInvalid},
	}
	for i, c := range cases {
		err := s.Add(c.req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("case %d: err %v, want it to mention %q", i, err, c.want)
			continue
		}
		reason, kind := Refusal(err)
		if kind != c.kind || !strings.Contains(reason, c.want) || (kind == ErrorInvalid && strings.Contains(reason, `"b"`)) {
			t.Errorf("case %d: Refusal(%v) = %q, %v; want kind %v and the reason alone", i, err, reason, kind, c.kind)
		}
	}
	// 32 positions fit the 8 blocks of 4 exactly (the last token's KV is never stored).
	mustAdd(t, s, &Request{RID: "c", InputIDs: make([]int32, 30), MaxNewTokens: 3, Sampling: greedy()})
	if l := s.Load(); l.Waiting != 2 {
		t.Errorf("load %+v after failed adds", l)
	}
}

func TestNewValidation(t *testing.T) {
	b := newReplay(t, 10, 4, 4)
	for _, cfg := range []Config{
		{MaxRunning: 0, MaxPrefillTokens: 1, MaxModelLen: 1},
		{MaxRunning: 1, MaxPrefillTokens: 0, MaxModelLen: 1},
		{MaxRunning: 1, MaxPrefillTokens: 1, MaxModelLen: 0},
		{MaxRunning: 1, MaxPrefillTokens: 1, MaxModelLen: 1, ChunkSize: -1},
	} {
		if _, err := New(b, cfg); err == nil {
			t.Errorf("New accepted %+v", cfg)
		}
	}
	if _, err := New(nil, Config{MaxRunning: 1, MaxPrefillTokens: 1, MaxModelLen: 1}); err == nil {
		t.Error("New accepted a nil backend")
	}
}

func TestLogprobsAndPenaltiesKeepRowsIntact(t *testing.T) {
	const vocab = 256
	s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 4, MaxPrefillTokens: 32})
	pen := greedy()
	pen.RepetitionPenalty, pen.FrequencyPenalty, pen.PresencePenalty = 1.3, 0.5, 0.5
	for i, sp := range []sampling.Params{pen, greedy(), pen} {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 6, vocab), MaxNewTokens: 15, Sampling: sp, Logprobs: i == 1})
	}
	results := map[string]*result{}
	run(t, s, results, 100)
	for i := range 3 {
		// The winner's logit (100) stays far above every other under these penalties.
		wantIDs(t, rid(i), results[rid(i)].ids, replay.Continuation(vocab, prompt(i, 6, vocab), 15))
	}
	lp := results[rid(1)].logprobs
	if len(lp) != 15 || len(results[rid(0)].logprobs) != 0 {
		t.Fatalf("%d logprobs for the request that asked, %d for one that did not", len(lp), len(results[rid(0)].logprobs))
	}
	for _, v := range lp {
		if v > 0 || v < -1e-6 {
			t.Fatalf("logprob %v of a one-hot winner, want ~0", v)
		}
	}
	checkDrained(t, s)
}

func TestSeededSamplingIsReproducible(t *testing.T) {
	const vocab = 64
	gen := func() []int32 {
		s := newScheduler(t, newReplay(t, vocab, 16, 4), Config{MaxRunning: 1, MaxPrefillTokens: 16})
		p := sampling.DefaultParams()
		p.Temperature = 60 // hot enough that the replay winner does not always win
		seed := uint64(7)
		p.Seed = &seed
		mustAdd(t, s, &Request{RID: "x", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 20, Sampling: p})
		results := map[string]*result{}
		run(t, s, results, 100)
		return results["x"].ids
	}
	a, b := gen(), gen()
	wantIDs(t, "second seeded run", b, a)
	if slices.Equal(a, replay.Continuation(vocab, []int32{1, 2, 3}, 20)) {
		t.Error("temperature 60 reproduced the greedy sequence; the test does not exercise sampling")
	}
}

// failing is a backend whose Forward fails after some steps, once or for good.
type failing struct {
	*replay.Runner
	after int
	once  bool
}

func (f *failing) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	if err := f.fail(); err != nil {
		return nil, err
	}
	return f.Runner.Forward(ctx, b)
}

// ForwardSample fails as Forward does, having called masks as a device would.
func (f *failing) ForwardSample(ctx context.Context, b *backend.Batch, specs []backend.SampleSpec, masks func()) ([]backend.Pick, [][]float32, error) {
	if err := f.fail(); err != nil {
		masks()
		return nil, nil, err
	}
	return f.Runner.ForwardSample(ctx, b, specs, masks)
}

func (f *failing) fail() error {
	if f.after == 0 {
		if f.once {
			f.after = -1
		}
		return errors.New("device lost")
	}
	f.after--
	return nil
}

// TestStepRetriesAfterForwardError: a failed step generates nothing, and stepping again carries
// on with every output intact.
func TestStepRetriesAfterForwardError(t *testing.T) {
	const vocab = 100
	for after := range 6 {
		f := &failing{Runner: newReplay(t, vocab, 32, 4), after: after, once: true}
		s := newScheduler(t, f, Config{MaxRunning: 2, MaxPrefillTokens: 6, ChunkSize: 4})
		for i := range 3 {
			mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 9, vocab), MaxNewTokens: 6, Sampling: greedy()})
		}
		results := map[string]*result{}
		failed := 0
		for step := 0; s.HasWork() && step < 100; step++ {
			out, err := s.Step(context.Background())
			if err != nil {
				failed++
				if len(out.Items) != 0 {
					t.Fatalf("failed step returned items %+v", out.Items)
				}
				continue
			}
			collect(t, out, results)
		}
		if failed != 1 {
			t.Fatalf("after %d: %d failed steps, want 1", after, failed)
		}
		for i := range 3 {
			wantIDs(t, rid(i), results[rid(i)].ids, replay.Continuation(vocab, prompt(i, 9, vocab), 6))
		}
		checkDrained(t, s)
	}
}

func TestForwardErrorThenFailAll(t *testing.T) {
	const vocab = 100
	f := &failing{Runner: newReplay(t, vocab, 32, 4), after: 2}
	s := newScheduler(t, f, Config{MaxRunning: 2, MaxPrefillTokens: 16})
	for i := range 3 {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 5, vocab), MaxNewTokens: 10, Sampling: greedy()})
	}
	results := map[string]*result{}
	for range 2 {
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		collect(t, out, results)
	}
	s.Abort(rid(1))
	if _, err := s.Step(context.Background()); err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Fatalf("step error %v", err)
	}
	out := s.FailAll(errors.New("device lost"))
	collect(t, out, results)
	if len(out.Items) != 3 {
		t.Fatalf("%d items from FailAll, want 3 (abort, error, error)", len(out.Items))
	}
	for i := range 3 {
		r := results[rid(i)]
		want := FinishError
		if i == 1 {
			want = FinishAbort
		}
		if r.last.FinishReason != want || (want == FinishError && r.last.Err != "device lost") {
			t.Errorf("%s: %+v", rid(i), r.last)
		}
	}
	checkDrained(t, s)
	if s.HasWork() {
		t.Error("work left after FailAll")
	}
}

func TestOutputLoad(t *testing.T) {
	s := newScheduler(t, newReplay(t, 50, 10, 4), Config{MaxRunning: 1, MaxPrefillTokens: 8})
	mustAdd(t, s, &Request{RID: "a", InputIDs: prompt(1, 6, 50), MaxNewTokens: 3, Sampling: greedy()})
	mustAdd(t, s, &Request{RID: "b", InputIDs: prompt(2, 6, 50), MaxNewTokens: 3, Sampling: greedy()})
	out, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (Load{Running: 1, Waiting: 1, KVTokensUsed: 8, KVTokensCapacity: 40, KVBlockSize: 4, WaitingTokens: 6, Stats: Stats{Steps: 1, BatchTokens: 6},
		WaitingByPriority: []PriorityCount{{Priority: 0, Count: 1}}}); !reflect.DeepEqual(out.Load, want) {
		t.Fatalf("load %+v, want %+v", out.Load, want)
	}
}

// TestRandomWorkloads mixes everything at once over several seeds: shared prompt prefixes,
// arrivals and aborts between steps, small caches and budgets. Every request that was not
// aborted must produce exactly its replay sequence; an aborted one a prefix of it; and the KV
// cache must be fully accounted for at the end.
func TestRandomWorkloads(t *testing.T) {
	const vocab = 800
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 99))
		bs := 1 + rng.IntN(8)
		blocks := 80/bs + rng.IntN(40)
		budget := 4 + rng.IntN(40)
		chunk := rng.IntN(budget + 1)
		maxRunning := 1 + rng.IntN(10)
		s := newScheduler(t, newReplay(t, vocab, blocks, bs), Config{MaxRunning: maxRunning, MaxPrefillTokens: budget, ChunkSize: chunk, MaxModelLen: 200})
		shared := [][]int32{prompt(int(seed), 30, vocab), prompt(int(seed)+50, 13, vocab)}
		prompts := map[string][]int32{}
		aborted := map[string]bool{}
		results := map[string]*result{}
		n := 0
		for step := 0; step < 3000 && (n < 60 || s.HasWork()); step++ {
			for n < 60 && rng.IntN(3) == 0 {
				var p []int32
				if k := rng.IntN(3); k < 2 {
					p = append(slices.Clone(shared[k][:1+rng.IntN(len(shared[k]))]), prompt(n, rng.IntN(8), vocab)...)
				} else {
					p = prompt(1000+n, 1+rng.IntN(40), vocab)
				}
				gen := 1 + rng.IntN(30)
				if s.blocksFor(len(p)+gen-1) > blocks {
					gen = 1
					p = p[:min(len(p), blocks*bs)]
				}
				prompts[rid(n)] = p
				mustAdd(t, s, &Request{RID: rid(n), InputIDs: p, MaxNewTokens: gen, Sampling: greedy()})
				n++
			}
			if rng.IntN(10) == 0 {
				victim := rid(rng.IntN(n + 1))
				if s.Abort(victim) {
					aborted[victim] = true
				}
			}
			out, err := s.Step(context.Background())
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			collect(t, out, results)
		}
		if n < 60 || s.HasWork() {
			t.Fatalf("seed %d: stalled with %d added; load %+v", seed, n, s.Load())
		}
		for id, p := range prompts {
			r := results[id]
			if r == nil || !r.last.Finished {
				t.Fatalf("seed %d: %s never finished", seed, id)
			}
			want := replay.Continuation(vocab, p, len(r.ids))
			wantIDs(t, id, r.ids, want)
			if aborted[id] != (r.last.FinishReason == FinishAbort) {
				t.Fatalf("seed %d: %s finished %v, aborted %v", seed, id, r.last.FinishReason, aborted[id])
			}
		}
		checkDrained(t, s)
		t.Logf("seed %d: bs %d blocks %d budget %d chunk %d running %d: %+v, %d aborted", seed, bs, blocks, budget, chunk, maxRunning, s.Stats(), len(aborted))
	}
}

// TestParallelSamplingMatchesSequential runs one mixed batch (greedy, seeded random, penalties,
// logprobs, constraints, min_new_tokens) with host sampling forced onto several goroutines and
// forced onto one, with the backend's device argmax hidden, and sampled by the backend
// (DeviceSampler): every request's output must be identical.
func TestParallelSamplingMatchesSequential(t *testing.T) {
	const vocab, n = 512, 48
	gen := func(parallelFloats int, hideArgmax bool) map[string]*result {
		r := newReplay(t, vocab, 256, 8)
		var b backend.Backend = hostArgmax{r, r}
		switch {
		case hideArgmax:
			b = hostOnly{r}
		case parallelFloats < 0:
			b = r // the runner's DeviceSampler: the same host sampler, called by the backend
		}
		s := newScheduler(t, b, Config{MaxRunning: n, MaxPrefillTokens: 256, EOS: []int32{7}})
		s.parallelFloats = parallelFloats
		for i := range n {
			p := greedy()
			req := &Request{RID: rid(i), InputIDs: prompt(i, 1+i%13, vocab), MaxNewTokens: 12 + i%5, Logprobs: i%3 == 0}
			switch i % 4 {
			case 1:
				p = sampling.DefaultParams()
				p.Temperature, p.TopP = 80, 0.9
				seed := uint64(i)
				p.Seed = &seed
			case 2:
				p.RepetitionPenalty, p.PresencePenalty = 1.2, 0.3
				req.MinNewTokens = 3
			case 3:
				req.Constraint = &allowSet{vocab: vocab, allow: func(tok int32) bool { return tok%5 != 0 }, canEndAfter: 4}
			}
			req.Sampling = p
			mustAdd(t, s, req)
		}
		results := map[string]*result{}
		run(t, s, results, 200)
		checkDrained(t, s)
		return results
	}
	cont, par, host, dev := gen(math.MaxInt, false), gen(1, false), gen(1, true), gen(-1, false)
	for i := range n {
		a := cont[rid(i)]
		for _, b := range []*result{par[rid(i)], host[rid(i)], dev[rid(i)]} {
			wantIDs(t, rid(i), b.ids, a.ids)
			if !slices.Equal(a.logprobs, b.logprobs) || a.last.FinishReason != b.last.FinishReason || a.last.MatchedStopToken != b.last.MatchedStopToken {
				t.Fatalf("%s: sequential %+v, other %+v", rid(i), a.last, b.last)
			}
		}
	}
}

// hostOnly hides a backend's DeviceArgmax and DeviceSampler: the scheduler samples every row.
type hostOnly struct{ backend.Backend }

// hostArgmax hides a backend's DeviceSampler but keeps its DeviceArgmax.
type hostArgmax struct {
	backend.Backend
	backend.DeviceArgmax
}

// nanRows hands out rows of NaN but keeps the replay runner's device argmax (and hides its
// DeviceSampler): only a pick that never reads its row can follow the replay sequence.
type nanRows struct {
	hostArgmax
	nan []float32
}

func (n *nanRows) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	rows, err := n.Backend.Forward(ctx, b)
	for i, r := range rows {
		if r != nil {
			rows[i] = n.nan
		}
	}
	return rows, err
}

// Plain greedy requests take the backend's argmax and never read their rows; a request that
// asks for logprobs still reads its row.
func TestDeviceArgmaxServesPlainGreedy(t *testing.T) {
	const vocab, n = 256, 16
	nan := make([]float32, vocab)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	r := newReplay(t, vocab, 128, 8)
	s := newScheduler(t, &nanRows{hostArgmax{r, r}, nan}, Config{MaxRunning: n, MaxPrefillTokens: 256})
	for i := range n {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt(i, 1+i%7, vocab), MaxNewTokens: 10, Sampling: greedy(), Logprobs: i == 0})
	}
	results := map[string]*result{}
	run(t, s, results, 100)
	want := map[string]*result{}
	ref := newScheduler(t, newReplay(t, vocab, 128, 8), Config{MaxRunning: n, MaxPrefillTokens: 256})
	for i := range n {
		mustAdd(t, ref, &Request{RID: rid(i), InputIDs: prompt(i, 1+i%7, vocab), MaxNewTokens: 10, Sampling: greedy()})
	}
	run(t, ref, want, 100)
	for i := 1; i < n; i++ {
		wantIDs(t, rid(i), results[rid(i)].ids, want[rid(i)].ids)
	}
	if slices.Equal(results[rid(0)].ids, want[rid(0)].ids) {
		t.Error("a request with logprobs followed the replay sequence from NaN rows: it did not read its row")
	}
}
