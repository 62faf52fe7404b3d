package scheduler

import (
	"path/filepath"
	"testing"

	"github.com/llmserve/llmserve/model"
)

// TestSpecCountsOnFinishItems serves a mix of requests with speculation on pico (batches mix
// requests with and without drafts; some finish on a stop id or string mid-draft) and checks
// that the finish items' speculative counts add up to the rank's Stats exactly, that each
// request's accepted positions are consistent (position j accepted at most as often as j-1,
// position 0 at most once per verification), and, for the requests that can only finish by
// length, that every generated token is either an accepted draft or the one token of an item
// (one item per step that emitted: the first token, a correction or the bonus).
func TestSpecCountsOnFinishItems(t *testing.T) {
	m, err := model.Load(filepath.Join("..", "models", "pico"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{MaxRunning: 16, MaxPrefillTokens: 1024, EOS: m.Generation.EOSTokenIDs, MaxModelLen: 512, Speculative: SpeculativeNgram}
	for _, v := range []struct {
		name           string
		blocks, budget int
	}{{"roomy", 256, 1024}, {"preempting", 48, 24}} {
		sc := cfg
		sc.MaxPrefillTokens = v.budget
		reqs := specRequests(m.Config.VocabSize, 7)
		got, s := runSpec(t, m, sc, v.blocks, reqs)
		st := s.Stats()
		var drafts, draftTokens, accepted int
		for _, r := range reqs {
			it := got[r.RID].last
			if !it.Finished {
				t.Fatalf("%s %s: not finished", v.name, r.RID)
			}
			drafts += it.SpecDrafts
			draftTokens += it.SpecDraftTokens
			acc := 0
			for j, a := range it.SpecAccepted {
				if a <= 0 || a > it.SpecDrafts || j > 0 && a > it.SpecAccepted[j-1] {
					t.Errorf("%s %s: accepted by position %v over %d verifications", v.name, r.RID, it.SpecAccepted, it.SpecDrafts)
				}
				acc += a
			}
			accepted += acc
			if acc > it.SpecDraftTokens || it.SpecDraftTokens > 0 && it.SpecDrafts == 0 {
				t.Errorf("%s %s: %d accepted of %d draft tokens in %d verifications", v.name, r.RID, acc, it.SpecDraftTokens, it.SpecDrafts)
			}
			// Requests that ignore EOS and have no stop condition end by length, never on an
			// accepted draft (a draft is never longer than the tokens left but one).
			if v.name == "roomy" && r.IgnoreEOS && r.StopCheck == nil {
				if it.FinishReason != FinishLength {
					t.Fatalf("%s: finished %v", r.RID, it.FinishReason)
				}
				if it.CompletionTokens != acc+got[r.RID].items {
					t.Errorf("%s: %d tokens, %d accepted drafts + %d items", r.RID, it.CompletionTokens, acc, got[r.RID].items)
				}
			}
		}
		t.Logf("%s: %d verifications, %d draft tokens, %d accepted", v.name, st.Drafts, st.DraftTokens, st.AcceptedTokens)
		if drafts != st.Drafts || draftTokens != st.DraftTokens || accepted != st.AcceptedTokens {
			t.Errorf("%s: finish items count %d verifications, %d draft tokens, %d accepted; the rank %d, %d, %d",
				v.name, drafts, draftTokens, accepted, st.Drafts, st.DraftTokens, st.AcceptedTokens)
		}
		if accepted == 0 || st.Drafts > st.DraftTokens {
			t.Errorf("%s: stats %+v", v.name, st)
		}
	}
}
