package scheduler

import (
	"context"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/model"
)

// A speculative scheduler's step that drafts nothing is a plain decode: the same batch entry
// as without speculation and no allocation more (the free-text workload drafts on almost no
// step, so anything the ngram mode added to those steps would be its whole cost there). Pico,
// greedy with a repetition penalty so its output does not loop.
func TestSpeculativeStepWithoutDraftIsPlain(t *testing.T) {
	m, err := model.Load(filepath.Join("..", "models", "pico"))
	if err != nil {
		t.Fatal(err)
	}
	type stepRecord struct {
		seq     int // tokens of the request's batch entry
		plain   bool
		mallocs uint64
	}
	run := func(mode string) ([]int32, []stepRecord, Stats) {
		s := newScheduler(t, newCPU(t, m, 256, 16), Config{MaxRunning: 1, MaxPrefillTokens: 2048, Speculative: mode})
		p := greedy()
		p.RepetitionPenalty = 1.3
		mustAdd(t, s, &Request{RID: "a", InputIDs: prompt(1, 40, m.Config.VocabSize), MaxNewTokens: 64, IgnoreEOS: true, Sampling: p})
		var ids []int32
		var steps []stepRecord
		var ms runtime.MemStats
		for s.HasWork() {
			runtime.ReadMemStats(&ms)
			before := ms.Mallocs
			out, err := s.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&ms)
			sq := s.batch.Seqs[0]
			steps = append(steps, stepRecord{seq: len(sq.Tokens), mallocs: ms.Mallocs - before,
				plain: len(sq.Tokens) == 1 && sq.Logits && !sq.AllLogits && sq.Generated})
			for _, it := range out.Items {
				ids = append(ids, it.NewIDs...)
			}
		}
		return ids, steps, s.Stats()
	}
	offIDs, offSteps, _ := run(SpeculativeOff)
	ngIDs, ngSteps, st := run(SpeculativeNgram)
	wantIDs(t, "ngram output", ngIDs, offIDs)
	// The plain decodes without speculation set the bar: their median allocations (the first
	// decode's buffers aside).
	var offMallocs []uint64
	for _, r := range offSteps[2:] {
		if !r.plain {
			t.Fatalf("a decode step without speculation has a batch entry of %d tokens", r.seq)
		}
		offMallocs = append(offMallocs, r.mallocs)
	}
	slices.Sort(offMallocs)
	bar := offMallocs[len(offMallocs)/2]
	plain, drafted := 0, 0
	for i, r := range ngSteps[2:] {
		if r.seq > 1 {
			drafted++
			continue
		}
		plain++
		if !r.plain {
			t.Errorf("ngram step %d drafted nothing but its batch entry is not a plain decode", i+2)
		}
		// A few mallocs of slack for the runtime's own (timers, the scheduler's goroutines).
		if r.mallocs > bar+8 {
			t.Errorf("ngram step %d drafted nothing but allocated %d times, a plain decode %d", i+2, r.mallocs, bar)
		}
	}
	if plain < len(ngSteps)/2 || st.DraftTokens >= 16 {
		t.Fatalf("the workload drafted on %d of %d steps (%d draft tokens): it no longer tests steps without drafts", drafted, len(ngSteps), st.DraftTokens)
	}
	t.Logf("%d steps without a draft, %d with; a plain decode allocates %d times", plain, drafted, bar)
}
