package scheduler

import (
	"encoding/json"
	"fmt"
	"github.com/llmserve/llmserve/backend"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/model"
)

// fixture is testdata/models/qwen3/expected.json (transformers, float32, greedy with a KV cache,
// no EOS stop).
type fixture struct {
	Prompts []struct {
		InputIDs     []int32 `json:"input_ids"`
		GreedyNewIDs []int32 `json:"greedy_new_ids"`
		MinTop2Gap   float64 `json:"min_top2_gap"`
	} `json:"prompts"`
}

// loadQwen3 loads testdata/models/qwen3 and its fixture.
func loadQwen3(t *testing.T) (*model.Model, *fixture) {
	t.Helper()
	dir := filepath.Join("..", "testdata", "models", "qwen3")
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m, &fx
}

// TestRealModelGreedyMatchesTransformers serves the fixture prompts through the scheduler on the
// real CPU backend — all at once, with a tight token budget (chunked prefill) and a KV cache too
// small for all of them (preemption and recompute) — and then once more with the prefixes
// cached. Greedy outputs must equal transformers' wherever the top-2 logit gap leaves no doubt.
func TestRealModelGreedyMatchesTransformers(t *testing.T) {
	m, fx := loadQwen3(t)
	const bs, numBlocks = 4, 64 // 256 positions; the prompts and outputs need ~340
	b, err := cpu.New(m, backend.Options{NumBlocks: numBlocks, BlockSize: bs, Tuning: cpu.Tuning{Threads: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	chk := &checkBatches{Backend: b, t: t, budget: 16, chunk: 8}
	s := newScheduler(t, chk, Config{MaxRunning: 4, MaxPrefillTokens: 16, ChunkSize: 8, EOS: m.Generation.EOSTokenIDs,
		MaxModelLen: m.Config.MaxPositions})
	add := func(round int) {
		for i, p := range fx.Prompts {
			mustAdd(t, s, &Request{RID: fmt.Sprintf("%d-%d", round, i), InputIDs: p.InputIDs, MaxNewTokens: len(p.GreedyNewIDs),
				IgnoreEOS: true, Sampling: greedy()})
		}
	}
	results := map[string]*result{}
	add(0)
	run(t, s, results, 1000)
	if s.Stats().Preemptions == 0 || chk.prefillSeqs == 0 {
		t.Errorf("want chunked prefill and preemption: %+v, %d partial chunks", s.Stats(), chk.prefillSeqs)
	}
	checkDrained(t, s)
	add(1)
	run(t, s, results, 1000)
	checkDrained(t, s)
	compared := 0
	for round := range 2 {
		for i, p := range fx.Prompts {
			id := fmt.Sprintf("%d-%d", round, i)
			r := results[id]
			if r == nil || r.last.FinishReason != FinishLength {
				t.Fatalf("%s: %+v", id, r)
			}
			if p.MinTop2Gap <= 1e-3 {
				continue
			}
			wantIDs(t, id, r.ids, p.GreedyNewIDs)
			compared++
		}
	}
	if compared == 0 {
		t.Fatal("no prompt has a clear top-2 gap; nothing compared")
	}
	// The repeats start from cached blocks: the longest prompt, which finished last in the
	// first round, from all of its full blocks but the one holding its last token; the others
	// from what the LRU kept of theirs.
	cached, longest := 0, 0
	for i, p := range fx.Prompts {
		got := results[fmt.Sprintf("1-%d", i)].last.CachedTokens
		if limit := (len(p.InputIDs) - 1) / bs * bs; got > limit || got%bs != 0 {
			t.Errorf("prompt %d (%d tokens): CachedTokens %d", i, len(p.InputIDs), got)
		}
		cached += got
		if len(p.InputIDs) > len(fx.Prompts[longest].InputIDs) {
			longest = i
		}
	}
	p := fx.Prompts[longest].InputIDs
	if got := results[fmt.Sprintf("1-%d", longest)].last.CachedTokens; got != (len(p)-1)/bs*bs {
		t.Errorf("longest prompt (%d tokens): CachedTokens %d on the repeat, want %d", len(p), got, (len(p)-1)/bs*bs)
	}
	t.Logf("%d prompt tokens cached on the repeat; %+v", cached, s.Stats())
}
