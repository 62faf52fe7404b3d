package scheduler

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
)

func TestNgramDraft(t *testing.T) {
	for _, c := range []struct {
		name string
		toks []int32
		k    int
		want []int32
	}{
		{"trigram", []int32{5, 1, 2, 3, 4, 9, 5, 1, 2, 3}, 4, []int32{4, 9, 5, 1}},
		{"k bounds it", []int32{5, 1, 2, 3, 4, 9, 5, 1, 2, 3}, 2, []int32{4, 9}},
		{"the match bounds it", []int32{1, 2, 3, 4, 9, 1, 2, 3}, 8, []int32{4, 9, 1}},
		{"latest occurrence", []int32{5, 1, 7, 5, 1, 8, 5, 1}, 2, []int32{8, 5}},
		{"longest suffix first", []int32{2, 3, 6, 9, 3, 7, 2, 3}, 1, []int32{6}},
		{"unigram", []int32{4, 5, 6, 5}, 3, []int32{6}},
		{"a repeat goes on with its period", []int32{7, 7, 7, 7, 7, 7}, 4, []int32{7, 7, 7, 7}},
		{"a short repeat is a short match", []int32{7, 7, 7}, 4, []int32{7, 7}},
		{"period of two", []int32{1, 2, 1, 2, 1, 2}, 5, []int32{1, 2, 1, 2}},
		{"period past the prompt", []int32{9, 3, 5, 8, 1, 3, 5, 8, 1, 3, 5}, 6, []int32{8, 1, 3, 5, 8, 1}},
		{"no repeat", []int32{1, 2, 3}, 4, nil},
		{"one token", []int32{4}, 4, nil},
		{"k 0", []int32{1, 2, 1}, 0, nil},
	} {
		got := ngramDraft(nil, c.toks, c.k, ngramMax, ngramMin)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: ngramDraft(%v, k=%d) = %v, want %v", c.name, c.toks, c.k, got, c.want)
		}
	}
	// dst keeps its contents: the scheduler appends drafts after the last token.
	if got := ngramDraft([]int32{99}, []int32{1, 2, 1, 2, 1}, 3, ngramMax, ngramMin); !slices.Equal(got, []int32{99, 2, 1, 2}) {
		t.Errorf("append to dst: %v", got)
	}
}

func TestBestDraft(t *testing.T) {
	for _, c := range []struct {
		alpha, rho float64
		maxK, want int
	}{
		{0.95, 0.05, 8, 8},  // cheap tokens, likely accepted: as long as allowed
		{0.5, 0.6, 8, 0},    // expensive tokens, a coin flip: never
		{0.87, 0.6, 8, 2},   // 1.87/1.6 < 2.63/2.2 > 3.29/2.8
		{0.3, 0, 5, 5},      // free tokens pay at any length
		{0.02, 0.001, 8, 0}, // gains under draftGain do not count
		{0.99, 0.1, 0, 0},
	} {
		if got := bestDraft(c.alpha, c.rho, c.maxK); got != c.want {
			t.Errorf("bestDraft(%v, %v, %d) = %d, want %d", c.alpha, c.rho, c.maxK, got, c.want)
		}
	}
}

func TestDraftCtlAdapts(t *testing.T) {
	const maxK = 8
	rho := 0.1
	var c draftCtl
	if k := c.length(maxK, rho); k != 2 {
		t.Fatalf("first draft length %d, want 2 (alpha 0.5)", k)
	}
	for range 4 {
		c.update(c.length(maxK, rho), c.length(maxK, rho))
	}
	if k := c.length(maxK, rho); k != maxK {
		t.Fatalf("after whole drafts accepted: %d (alpha %.2f), want %d", k, c.alpha(), maxK)
	}
	// Drafts that gain nothing: alpha falls until no length pays; the request then decodes
	// plainly, without blind probes.
	rho = 0.3
	misses := 0
	for c.length(maxK, rho) > 0 {
		c.update(1, 0)
		if misses++; misses > 20 {
			t.Fatalf("still drafting at alpha %.2f", c.alpha())
		}
	}
	for i := range 100 {
		if k := c.length(maxK, rho); k != 0 {
			t.Fatalf("plain decode %d after drafts stopped paying: length %d", i, k)
		}
	}
	// A shadow counts once a token differs, as a draft with the tokens before it accepted.
	acc, rej := c.acc, c.rej
	c.watch([]int32{7, 8, 9})
	c.observe(7)
	if !c.watching() {
		t.Fatal("shadow resolved after 1 of 3 matching tokens")
	}
	c.observe(5)
	if c.watching() || c.acc != acc*draftDecay+1 || c.rej != rej*draftDecay+1 {
		t.Fatalf("after a shadow matched for 1 of 3 tokens: pending %v, acc %v, rej %v (were %v, %v)", c.watching(), c.acc, c.rej, acc, rej)
	}
	// Shadows that miss at once keep drafting off.
	for range 3 {
		c.watch([]int32{7, 8, 9})
		c.observe(5)
	}
	if k := c.length(maxK, rho); k != 0 {
		t.Fatalf("after shadows that missed: length %d (alpha %.2f)", k, c.alpha())
	}
	c.observe(1) // no shadow: nothing to record
	// The output starts repeating: shadows that match in full bring drafting back within a
	// few tokens, and the pending shadow is dropped when it does.
	steps := 0
	for c.length(maxK, rho) == 0 {
		if steps++; steps > 4 {
			t.Fatalf("not drafting after %d whole shadows matched (alpha %.2f)", steps-1, c.alpha())
		}
		c.watch([]int32{1, 2, 3, 4})
		for _, tok := range []int32{1, 2, 3, 4} {
			c.observe(tok)
		}
		if c.watching() {
			t.Fatal("shadow pending after all its tokens matched")
		}
	}
	c.watch([]int32{1, 2})
	if k := c.length(maxK, rho); k == 0 || c.watching() {
		t.Fatalf("length %d with a shadow pending %v, want a draft and no shadow", k, c.watching())
	}
}

func TestStepCost(t *testing.T) {
	var c stepCost
	for range 50 {
		c.add(1, 1.5)
	}
	if got := c.rho(1); got != stepCostPrior {
		t.Fatalf("steps of one size: rho %v, want the prior", got)
	}
	// One two-token step that took twice a decode (a fit of rho 1): little evidence, so rho
	// moves only part of the way from the prior.
	c.add(2, 3)
	if got := c.rho(1); got <= stepCostPrior || got > 0.5 {
		t.Fatalf("after one 2-token step of twice a decode: rho %v, want in (%v, 0.5]", got, stepCostPrior)
	}
	// Many steps of every size on t = 1 + 0.5·n: the fit rules, and one more token in a
	// one-token step costs a third of it, in a four-token step a sixth.
	for range 40 {
		for _, n := range []int{3, 5, 1, 2, 4, 9, 1, 6} {
			c.add(n, 1+0.5*float64(n))
		}
	}
	if got := c.rho(1); math.Abs(got-1.0/3) > 0.005 {
		t.Fatalf("rho(1) = %v, want 1/3", got)
	}
	if got := c.rho(4); math.Abs(got-0.5/3) > 0.005 {
		t.Fatalf("rho(4) = %v, want 1/6", got)
	}
}

// specModel is a real model the speculative tests run on.
type specModel struct {
	name string
	m    *model.Model
}

func specModels(t *testing.T) []specModel {
	t.Helper()
	dirs := []string{filepath.Join("..", "models", "pico"), filepath.Join("..", "testdata", "models", "qwen3"), filepath.Join("..", "testdata", "models", "llama")}
	if !testing.Short() {
		dirs = append(dirs, filepath.Join("..", "testdata", "models", "qwen2"), filepath.Join("..", "testdata", "models", "qwen3-bf16"))
	}
	var ms []specModel
	for _, d := range dirs {
		m, err := model.Load(d)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, specModel{filepath.Base(d), m})
	}
	return ms
}

func newCPU(t testing.TB, m *model.Model, blocks, bs int) backend.Backend {
	t.Helper()
	b, err := cpu.New(m, backend.Options{NumBlocks: blocks, BlockSize: bs, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func seeded(temp float32, seed uint64) sampling.Params {
	p := sampling.DefaultParams()
	p.Temperature, p.Seed = temp, &seed
	return p
}

// specRequests is a mix of requests over a repetitive ("code editing": the prompt holds a text
// twice, so its continuation is often a copy) and a plain prompt: greedy, seeded sampling with
// top-p, penalties with logprobs, min_new_tokens with a stop id, a stop string (a StopCheck
// that fires mid-run), a grammar-like constraint. stopTok is a token the greedy output holds.
func specRequests(vocab int, stopTok int32) []*Request {
	rng := rand.New(rand.NewPCG(7, uint64(vocab)))
	base := make([]int32, 24)
	for i := range base {
		base[i] = int32(1 + rng.IntN(vocab-1))
	}
	rep := append(append(slices.Clone(base), base...), base[:10]...)
	plain := make([]int32, 9)
	for i := range plain {
		plain[i] = int32(1 + rng.IntN(vocab-1))
	}
	var reqs []*Request
	for pi, p := range [][]int32{rep, plain} {
		add := func(name string, r *Request) {
			r.RID = fmt.Sprintf("%s-p%d", name, pi)
			r.InputIDs = p
			if r.MaxNewTokens == 0 {
				r.MaxNewTokens = 40
			}
			reqs = append(reqs, r)
		}
		add("greedy", &Request{IgnoreEOS: true, Sampling: greedy()})
		sp := seeded(0.8, 11)
		sp.TopP = 0.9
		add("seeded", &Request{IgnoreEOS: true, Sampling: sp})
		pen := seeded(1.1, 5)
		pen.TopK, pen.RepetitionPenalty, pen.FrequencyPenalty, pen.PresencePenalty = 30, 1.2, 0.3, 0.2
		add("penalties", &Request{IgnoreEOS: true, Sampling: pen, Logprobs: true, TopLogprobs: 3})
		add("greedy-logprobs", &Request{IgnoreEOS: true, Sampling: greedy(), Logprobs: true, TopLogprobs: 2, MaxNewTokens: 33})
		add("stopid", &Request{Sampling: greedy(), MinNewTokens: 3, StopTokenIDs: []int32{stopTok}})
		// A stop string: fires at the third generated token with id%5 == 2.
		n := 0
		add("stopstr", &Request{IgnoreEOS: true, Sampling: seeded(0.7, 3), MinNewTokens: 2, StopCheck: func(ids []int32) (string, bool) {
			for _, id := range ids {
				if id%5 == 2 {
					n++
				}
			}
			return "STOP", n >= 3
		}})
		add("masked", &Request{IgnoreEOS: true, Sampling: seeded(0.9, 8), Constraint: &allowSet{vocab: vocab, allow: func(tok int32) bool { return tok%3 != 1 }}})
		add("short", &Request{IgnoreEOS: true, Sampling: greedy(), MaxNewTokens: 2})
	}
	return reqs
}

// runSpec serves reqs on m with the given scheduler settings and returns each one's result.
func runSpec(t *testing.T, m *model.Model, cfg Config, blocks int, reqs []*Request) (map[string]*result, *Scheduler) {
	t.Helper()
	const bs = 4
	cfg.KVEvents = true
	s := newScheduler(t, newCPU(t, m, blocks, bs), cfg)
	for _, r := range reqs {
		mustAdd(t, s, r)
	}
	results := map[string]*result{}
	mirror := newKVMirror(t, DefaultKVHashSeed)
	maxIDs := 1
	if cfg.Speculative == SpeculativeNgram {
		maxIDs = s.cfg.MaxDraft + 1
	}
	for step := 0; s.HasWork(); step++ {
		if step == 5000 {
			t.Fatalf("still working after %d steps", step)
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		collectN(t, out, results, maxIDs)
		// The prefix cache's events stay truthful: what they add up to is what it holds, and
		// every stored block holds accepted tokens of some request.
		for _, e := range out.KVEvents {
			mirror.apply(e, bs)
		}
		if got := s.KVCachedBlocks(); !maps.EqualFunc(got, mirror.blocks, slices.Equal) {
			t.Fatalf("step %d: pool caches %d blocks, events say %d", step, len(got), len(mirror.blocks))
		}
	}
	for h, toks := range mirror.blocks {
		if !slices.ContainsFunc(reqs, func(r *Request) bool {
			all := append(slices.Clone(r.InputIDs), results[r.RID].ids...)
			for i := 0; i+len(toks) <= len(all); i += bs {
				if slices.Equal(all[i:i+len(toks)], toks) {
					return true
				}
			}
			return false
		}) {
			t.Errorf("cached block %d holds %v, no request's tokens", h, toks)
		}
	}
	checkDrained(t, s)
	return results, s
}

// TestSpeculativeOutputsIdentical serves a mix of requests (greedy, seeded sampling, penalties,
// logprobs, stop ids and strings, a constraint, short and long outputs, so batches mix requests
// with and without drafts) on real models with speculation off and on, and requires every id,
// logprob, top logprob and finish to be the same. It runs them once more with speculation on a
// KV cache so small that requests are preempted mid-run, where the recomputed positions'
// rows may differ in the last bits (a preempted request's generated tokens are recomputed as a
// prefill chunk, with or without speculation), so it checks the accounting there: the KV
// events, every request finishing with its ids counted, and the pool drained.
func TestSpeculativeOutputsIdentical(t *testing.T) {
	for _, sm := range specModels(t) {
		t.Run(sm.name, func(t *testing.T) {
			vocab := sm.m.Config.VocabSize
			// Every prompt is admitted in the first step, so both runs chunk the prefills alike
			// (a prefill's rows depend on its chunking in the last bits).
			cfg := Config{MaxRunning: 16, MaxPrefillTokens: 1024, EOS: sm.m.Generation.EOSTokenIDs, MaxModelLen: 512}
			// The stop id is a token of the plain greedy output, so that request stops mid-run.
			probe, _ := runSpec(t, sm.m, cfg, 256, specRequests(vocab, -1)[:1])
			stopTok := probe["greedy-p0"].ids[17]
			base, _ := runSpec(t, sm.m, cfg, 256, specRequests(vocab, stopTok))
			for _, v := range []struct {
				name   string
				blocks int
				budget int
			}{{"roomy", 256, 1024}, {"preempting", 48, 24}} {
				sc := cfg
				sc.Speculative, sc.MaxPrefillTokens = SpeculativeNgram, v.budget
				got, s := runSpec(t, sm.m, sc, v.blocks, specRequests(vocab, stopTok))
				st := s.Stats()
				t.Logf("%s: %d steps, %d draft tokens, %d accepted, %d preemptions", v.name, st.Steps, st.DraftTokens, st.AcceptedTokens, st.Preemptions)
				if st.DraftTokens == 0 || sm.name == "pico" && st.AcceptedTokens == 0 {
					t.Errorf("%s: no drafts verified or none accepted: %+v", v.name, st)
				}
				if v.name == "preempting" {
					if st.Preemptions == 0 {
						t.Errorf("%s: no preemption", v.name)
					}
					for rid, r := range got {
						if !r.last.Finished || r.last.FinishReason == FinishError {
							t.Errorf("%s %s: %+v", v.name, rid, r.last)
						}
					}
					continue
				}
				compareResults(t, v.name, base, got)
			}
			if r := base["stopid-p0"]; r.last.MatchedStopToken != stopTok {
				t.Errorf("the stop id did not stop its request: %+v", r.last)
			}
		})
	}
}

func compareResults(t *testing.T, what string, want, got map[string]*result) {
	t.Helper()
	for _, rid := range slices.Sorted(maps.Keys(want)) {
		w, g := want[rid], got[rid]
		if g == nil {
			t.Errorf("%s %s: no result", what, rid)
			continue
		}
		if !slices.Equal(g.ids, w.ids) {
			t.Errorf("%s %s: ids differ\n got %v\nwant %v", what, rid, g.ids, w.ids)
			continue
		}
		if !slices.Equal(g.logprobs, w.logprobs) || !slices.Equal(g.topIDs, w.topIDs) || !slices.Equal(g.topLps, w.topLps) {
			t.Errorf("%s %s: logprobs differ\n got %v %v\nwant %v %v", what, rid, g.logprobs, g.topIDs, w.logprobs, w.topIDs)
		}
		gl, wl := g.last, w.last
		if gl.FinishReason != wl.FinishReason || gl.MatchedStop != wl.MatchedStop || gl.MatchedStopToken != wl.MatchedStopToken ||
			gl.CompletionTokens != wl.CompletionTokens || gl.PromptTokens != wl.PromptTokens {
			t.Errorf("%s %s: finish differs: got %v %q %d (%d tokens), want %v %q %d (%d tokens)", what, rid,
				gl.FinishReason, gl.MatchedStop, gl.MatchedStopToken, gl.CompletionTokens, wl.FinishReason, wl.MatchedStop, wl.MatchedStopToken, wl.CompletionTokens)
		}
	}
}

// scripted is a DraftConstraint that allows only first as the first token, then every token,
// and forces a fixed draft after the first token: it stands for a grammar that admits one
// continuation there, so tests choose the drafts.
type scripted struct {
	vocab  int
	first  int32
	forced []int32
	steps  int
}

func (c *scripted) FillMask(dst []uint64) {
	if c.steps == 0 {
		dst[c.first/64] |= 1 << (uint(c.first) % 64)
		return
	}
	for tok := range c.vocab {
		dst[tok/64] |= 1 << (uint(tok) % 64)
	}
}
func (c *scripted) Accept(int32) error { c.steps++; return nil }
func (c *scripted) CanTerminate() bool { return true }
func (c *scripted) IsTerminated() bool { return false }
func (c *scripted) ForcedTokens(dst []int32, max int) []int32 {
	if c.steps != 1 {
		return dst
	}
	return append(dst, c.forced[:min(max, len(c.forced))]...)
}
func (c *scripted) Admits(toks []int32) int { return len(toks) }

// TestSpeculativeSamplingKeepsDistribution draws the second and third tokens of many seeded
// requests on pico (the first is fixed by a mask), each given a draft that is often wrong (the
// most likely token, at temperature 2), and checks with a chi-square test that both follow the model's
// distribution (the third given that the draft was accepted), computed from plain forwards.
func TestSpeculativeSamplingKeepsDistribution(t *testing.T) {
	m, err := model.Load(filepath.Join("..", "models", "pico"))
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config.VocabSize
	const x = 87 // the first token
	prompt := []int32{400, 1234, 87, 9, 2000, 31}
	const topK, temp = 6, 2
	params := func(seed uint64) sampling.Params {
		p := seeded(temp, seed)
		p.TopK = topK
		return p
	}
	// The target distributions: top-k softmax of the model's rows after the prompt and after
	// the prompt and the draft's first token.
	ref := newCPU(t, m, 64, 4)
	dist := func(ids []int32) map[int32]float64 {
		rows, err := ref.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: ids, BlockTable: []int32{0, 1, 2, 3}, Logits: true}}})
		if err != nil {
			t.Fatal(err)
		}
		row := rows[0]
		idx := make([]int32, vocab)
		for i := range idx {
			idx[i] = int32(i)
		}
		slices.SortFunc(idx, func(a, b int32) int {
			if row[a] != row[b] {
				if row[a] > row[b] {
					return -1
				}
				return 1
			}
			return int(a - b)
		})
		p := map[int32]float64{}
		z := 0.0
		for _, id := range idx[:topK] {
			p[id] = math.Exp(float64(row[id]-row[idx[0]]) / temp)
			z += p[id]
		}
		for id := range p {
			p[id] /= z
		}
		return p
	}
	p1 := dist(append(slices.Clone(prompt), x))
	byProb := slices.SortedFunc(maps.Keys(p1), func(a, b int32) int {
		if p1[a] > p1[b] {
			return -1
		}
		return 1
	})
	d1 := byProb[0] // the most likely, often wrong at this temperature
	p2 := dist(append(slices.Clone(prompt), x, d1))

	n := 4000
	if testing.Short() {
		n = 300
	}
	s := newScheduler(t, newCPU(t, m, 2048, 4), Config{MaxRunning: 64, MaxPrefillTokens: 512, EOS: m.Generation.EOSTokenIDs,
		MaxModelLen: 64, Speculative: SpeculativeNgram})
	for i := range n {
		mustAdd(t, s, &Request{RID: rid(i), InputIDs: prompt, MaxNewTokens: 3, IgnoreEOS: true, Sampling: params(uint64(i)),
			Constraint: &scripted{vocab: vocab, first: x, forced: []int32{d1}}})
	}
	results := map[string]*result{}
	for s.HasWork() {
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		collectN(t, out, results, 3)
	}
	first, second := map[int32]int{}, map[int32]int{}
	for _, r := range results {
		if len(r.ids) != 3 || r.ids[0] != x {
			t.Fatalf("ids %v: %+v", r.ids, r.last)
		}
		first[r.ids[1]]++
		if r.ids[1] == d1 {
			second[r.ids[2]]++
		}
	}
	st := s.Stats()
	if st.DraftTokens != n || st.AcceptedTokens != first[d1] {
		t.Fatalf("drafts not verified: %+v", st)
	}
	chiSquare(t, "second token", first, p1)
	chiSquare(t, "third token after the accepted draft", second, p2)
	t.Logf("%d requests; %d draft tokens, %d accepted (p=%.3f); p1 %v", n, st.DraftTokens, st.AcceptedTokens, p1[d1], p1)
}

// chiSquare fails t when counts are unlikely under p (p-value below 0.001).
func chiSquare(t *testing.T, what string, counts map[int32]int, p map[int32]float64) {
	t.Helper()
	total := 0
	for id, c := range counts {
		if p[id] == 0 {
			t.Fatalf("%s: token %d drawn %d times, outside the distribution's support", what, id, c)
		}
		total += c
	}
	x2 := 0.0
	for id, q := range p {
		e := q * float64(total)
		d := float64(counts[id]) - e
		x2 += d * d / e
	}
	// The 0.999 quantile of chi-square with len(p)-1 = 5 degrees of freedom.
	const crit5 = 20.515
	if len(p) != 6 {
		t.Fatalf("want 6 categories, have %d", len(p))
	}
	if x2 > crit5 {
		t.Errorf("%s: chi-square %.2f over %d draws exceeds %.2f (counts %v, p %v)", what, x2, total, crit5, counts, p)
	}
	t.Logf("%s: chi-square %.2f over %d draws", what, x2, total)
}
