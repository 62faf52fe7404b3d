package detok

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// received is what one request's items add up to at its worker.
type received struct {
	ids, topIDs          []int32
	lps, tops, promptLps []float32
	text                 string
	items                int   // items that carried the request
	completion           int32 // the last completion count
	prompt               int32
	finished             bool
	reason               ipc.FinishReason
	matched              string
	requestID            string
	queueNanos           int64
	specDrafts           int32
	specAccepted         []int32
}

func (r *received) add(it *ipc.TextItem) {
	r.items++
	r.ids = append(r.ids, it.NewIDs...)
	r.lps = append(r.lps, it.Logprobs...)
	r.topIDs = append(r.topIDs, it.TopLogprobIDs...)
	r.tops = append(r.tops, it.TopLogprobs...)
	r.promptLps = append(r.promptLps, it.PromptLogprobs...)
	r.text += it.Text
	r.completion = it.CompletionTokens
	if it.PromptTokens > 0 {
		r.prompt = it.PromptTokens
	}
	if it.RequestID != "" {
		r.requestID = it.RequestID
	}
	if it.Finished {
		r.finished, r.reason, r.matched, r.queueNanos = true, it.FinishReason, it.MatchedStop, it.QueueNanos
		r.specDrafts, r.specAccepted = it.SpecDrafts, slices.Clone(it.SpecAccepted)
	}
}

// TestCoalescerEqualsSteps: the steps of three requests (two workers; logprobs with top
// entries; prompt logprobs and a request id on the first item only; a stop string that ends
// one, its text held back from there; another finishing on length with its rank times) give
// each worker the same ids, text, logprobs, counts and finish whether every step is
// detokenized alone or rounds of 2, 3 or 7 steps are merged before detokenizing, with one item
// per request per round. The steps' decode buffers are overwritten after each Add, as
// detokd's are, and the merged items do not change.
func TestCoalescerEqualsSteps(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("hello world, this is a test of merged steps and their text", false)
	const steps = 12
	if len(ids) < steps {
		t.Fatalf("encode gave %d ids, want %d", len(ids), steps)
	}
	for _, round := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			d := NewDetokenizer(tok, 2)
			co := NewCoalescer()
			got := map[string]*received{"a": {}, "b": {}, "c": {}}
			var lastLoad [2]ipc.RankLoad
			flush := func() {
				perRID := map[string]int{}
				out, err := d.StepMerged(co.Items(), co.Loads())
				if err != nil {
					t.Fatal(err)
				}
				for w, b := range out {
					if len(b.Loads) != 1 {
						t.Fatalf("worker %d: %d loads, want the rank's latest only", w, len(b.Loads))
					}
					lastLoad[w] = b.Loads[0]
					for i := range b.Items {
						it := &b.Items[i]
						perRID[it.RID]++
						got[it.RID].add(it)
					}
				}
				for rid, n := range perRID {
					if n != 1 {
						t.Errorf("request %s: %d items in one round", rid, n)
					}
				}
				co.Reset()
			}
			// Decode buffers, overwritten after every Step as TokenBatch.Decode reuses them.
			scratchIDs := make([]int32, 3)
			scratchLps := make([]float32, 4)
			received := make([]uint64, 2)
			scratchSpec := make([]int32, 2)
			for s := 0; s < steps; s++ {
				scratchIDs[0], scratchIDs[1], scratchIDs[2] = ids[s], ids[s], ids[(s+1)%len(ids)]
				scratchLps[0], scratchLps[1], scratchLps[2], scratchLps[3] = -float32(s), -1, -2, -3
				received[0], received[1] = uint64(s), uint64(2*s)
				a := ipc.TokenItem{RID: "a", Owner: 0, NewIDs: scratchIDs[0:1], Logprobs: scratchLps[0:1],
					TopLogprobIDs: scratchIDs[1:3], TopLogprobs: scratchLps[2:4], CompletionTokens: int32(s + 1), MatchedStopToken: -1}
				b := ipc.TokenItem{RID: "b", Owner: 1, NewIDs: scratchIDs[0:1], CompletionTokens: int32(s + 1), MatchedStopToken: -1}
				c := ipc.TokenItem{RID: "c", Owner: 1, NewIDs: scratchIDs[0:1], CompletionTokens: int32(s + 1), MatchedStopToken: -1}
				if s == 0 {
					a.PromptLogprobs, a.PromptTokens, a.RequestID = scratchLps[1:2], 9, "req-a"
					b.StopStrings = []string{" test"}
				}
				if s == steps-1 {
					a.Finished, a.FinishReason, a.QueueNanos = true, ipc.FinishLength, 42
					scratchSpec[0], scratchSpec[1] = 5, 3
					a.SpecDrafts, a.SpecDraftTokens, a.SpecAccepted = 6, 20, scratchSpec
					b.Finished, b.FinishReason, b.MatchedStop = true, ipc.FinishStop, " test"
				}
				co.Add(&ipc.TokenBatch{Rank: 3, Seq: uint64(s + 1), Load: ipc.Load{Running: int64(s), Received: received}, Items: []ipc.TokenItem{a, b, c}})
				for i := range scratchIDs {
					scratchIDs[i] = -7
				}
				for i := range scratchLps {
					scratchLps[i] = 99
				}
				received[0], received[1] = 1e9, 1e9
				scratchSpec[0], scratchSpec[1] = -1, -1
				if (s+1)%round == 0 || s == steps-1 {
					flush()
				}
			}
			a, b, c := got["a"], got["b"], got["c"]
			wantLps := make([]float32, steps)
			for s := range wantLps {
				wantLps[s] = -float32(s)
			}
			if !slices.Equal(a.ids, ids[:steps]) || !slices.Equal(a.lps, wantLps) || len(a.topIDs) != 2*steps || len(a.tops) != 2*steps {
				t.Errorf("a: ids %v lps %v top %v/%v", a.ids, a.lps, a.topIDs, a.tops)
			}
			if want := tok.Decode(ids[:steps], true); a.text != want || c.text != want {
				t.Errorf("text a %q c %q, want %q", a.text, c.text, want)
			}
			if !slices.Equal(a.promptLps, []float32{-1}) || a.prompt != 9 || a.requestID != "req-a" {
				t.Errorf("a's first-item fields: prompt logprobs %v, prompt tokens %d, request id %q", a.promptLps, a.prompt, a.requestID)
			}
			if a.completion != steps || !a.finished || a.reason != ipc.FinishLength || a.queueNanos != 42 ||
				a.specDrafts != 6 || !slices.Equal(a.specAccepted, []int32{5, 3}) {
				t.Errorf("a's finish: completion %d finished %v reason %v queue %d speculation %d %v", a.completion, a.finished, a.reason, a.queueNanos, a.specDrafts, a.specAccepted)
			}
			if c.completion != steps || c.finished {
				t.Errorf("c: completion %d finished %v", c.completion, c.finished)
			}
			if !b.finished || b.reason != ipc.FinishStop || b.matched != " test" || int(b.completion) != len(b.ids) || b.text != "hello world, this is a" {
				t.Errorf("b (stop %q): finished %v reason %v matched %q completion %d ids %d text %q", " test", b.finished, b.reason, b.matched, b.completion, len(b.ids), b.text)
			}
			for w, l := range lastLoad {
				if l.Rank != 3 || l.Seq != steps || l.Load.Running != steps-1 || !slices.Equal(l.Load.Received, []uint64{steps - 1, 2 * (steps - 1)}) {
					t.Errorf("worker %d's last load %+v", w, l)
				}
			}
			if steps/round > 0 && round > 1 && a.items > (steps+round-1)/round {
				t.Errorf("a came in %d items over %d rounds", a.items, (steps+round-1)/round)
			}
		})
	}
}

// TestCoalescerLoadsByArrival: each rank keeps its latest load by arrival, not by Seq (a
// restarted rank starts its Seq over), and a worker with no items still gets every rank's.
func TestCoalescerLoadsByArrival(t *testing.T) {
	co := NewCoalescer()
	add := func(rank uint32, seq uint64, running int64) {
		co.Add(&ipc.TokenBatch{Rank: rank, Seq: seq, Load: ipc.Load{Running: running}})
	}
	add(0, 50, 1)
	add(1, 7, 2)
	add(0, 1, 3) // rank 0 restarted
	out, err := NewDetokenizer(nil, 2).StepMerged(co.Items(), co.Loads())
	if err != nil {
		t.Fatal(err)
	}
	for w, b := range out {
		if len(b.Loads) != 2 || b.Loads[0].Rank != 0 || b.Loads[0].Seq != 1 || b.Loads[0].Load.Running != 3 || b.Loads[1].Seq != 7 {
			t.Errorf("worker %d loads %+v", w, b.Loads)
		}
	}
	co.Reset()
	if len(co.Items())+len(co.Loads()) != 0 || co.Len() != 0 {
		t.Errorf("after Reset: items %+v loads %+v", co.Items(), co.Loads())
	}
}

// TestCoalescerKeepsItemsAfterFinish: an item of a request after its finishing item (the rank
// sends none) is not merged into the finished one, so it is seen as it came.
func TestCoalescerKeepsItemsAfterFinish(t *testing.T) {
	co := NewCoalescer()
	co.Add(&ipc.TokenBatch{Items: []ipc.TokenItem{{RID: "x", NewIDs: []int32{1}, CompletionTokens: 1, Finished: true, FinishReason: ipc.FinishLength}}})
	co.Add(&ipc.TokenBatch{Items: []ipc.TokenItem{{RID: "x", NewIDs: []int32{2}, CompletionTokens: 2}}})
	items := co.Items()
	if len(items) != 2 || !slices.Equal(items[0].NewIDs, []int32{1}) || !items[0].Finished || !slices.Equal(items[1].NewIDs, []int32{2}) || co.Merged() != 0 || co.Len() != 2 {
		t.Errorf("items %+v, merged %d", items, co.Merged())
	}
}

// TestCoalescerKeepsErrorKind: a request's error item merged onto its earlier tokens keeps the
// error's kind, which decides whether its client is told the request was its own fault.
func TestCoalescerKeepsErrorKind(t *testing.T) {
	co := NewCoalescer()
	co.Add(&ipc.TokenBatch{Items: []ipc.TokenItem{{RID: "x", NewIDs: []int32{1}, CompletionTokens: 1}}})
	co.Add(&ipc.TokenBatch{Items: []ipc.TokenItem{{RID: "x", CompletionTokens: 1, Finished: true, FinishReason: ipc.FinishError, Error: "bad grammar", ErrorKind: ipc.ErrorInvalid}}})
	items := co.Items()
	if len(items) != 1 || items[0].Error != "bad grammar" || items[0].ErrorKind != ipc.ErrorInvalid || !slices.Equal(items[0].NewIDs, []int32{1}) || co.Merged() != 1 {
		t.Fatalf("merged item %+v, want one item with the id, the error and its kind", items)
	}
}

// TestCoalescerFollowsShiftingBatches: two ranks' steps, interleaved, each listing its live
// requests in order while requests finish (several at once, more than the look-ahead spans)
// and new ones join at the end, are merged in rounds of random size and detokenized: every
// request gets exactly its ids, their text and its finish, one item per round (the coalescer
// and the detokenizer find most requests by position, the rest by rid).
func TestCoalescerFollowsShiftingBatches(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	vocab := tok.Encode("the quick brown fox jumps over the lazy dog while seven wizards hum; naïve café ü", false)
	rng := rand.New(rand.NewPCG(1, 2))
	type live struct {
		rid    string
		length int // tokens it generates in all
		ids    []int32
	}
	d := NewDetokenizer(tok, 2)
	co := NewCoalescer()
	got := map[string]*received{}
	want := map[string][]int32{}
	ranks := [2][]*live{}
	next := 0
	join := func(r int) {
		l := &live{rid: fmt.Sprintf("r%d-%03d", r, next), length: 1 + rng.IntN(30)}
		next++
		ranks[r] = append(ranks[r], l)
		got[l.rid] = &received{}
	}
	for r := range ranks {
		for range 20 {
			join(r)
		}
	}
	flush := func() {
		perRID := map[string]int{}
		out, err := d.StepMerged(co.Items(), co.Loads())
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range out {
			for i := range b.Items {
				it := &b.Items[i]
				perRID[it.RID]++
				got[it.RID].add(it)
			}
		}
		for rid, n := range perRID {
			if n != 1 {
				t.Fatalf("request %s: %d items in one round", rid, n)
			}
		}
		co.Reset()
	}
	inRound := 0
	for step := 0; step < 400; step++ {
		r := step % 2
		var items []ipc.TokenItem
		for _, l := range ranks[r] {
			id := vocab[rng.IntN(len(vocab))]
			l.ids = append(l.ids, id)
			it := ipc.TokenItem{RID: l.rid, Owner: uint32(len(l.rid) % 2), NewIDs: []int32{id}, CompletionTokens: int32(len(l.ids)), MatchedStopToken: -1}
			if len(l.ids) == l.length {
				it.Finished, it.FinishReason = true, ipc.FinishLength
				want[l.rid] = l.ids
			}
			items = append(items, it)
		}
		co.Add(&ipc.TokenBatch{Rank: uint32(r), Seq: uint64(step), Items: items})
		ranks[r] = slices.DeleteFunc(ranks[r], func(l *live) bool { return len(l.ids) == l.length })
		if step < 300 {
			for range rng.IntN(4) {
				join(r)
			}
		}
		if inRound++; rng.IntN(4) == 0 {
			flush()
			inRound = 0
		}
	}
	flush()
	if len(want) < 100 {
		t.Fatalf("only %d requests finished", len(want))
	}
	for rid, ids := range want {
		g := got[rid]
		if !slices.Equal(g.ids, ids) || g.text != tok.Decode(ids, true) || !g.finished || int(g.completion) != len(ids) {
			t.Errorf("%s: ids %v text %q finished %v completion %d, want ids %v text %q", rid, g.ids, g.text, g.finished, g.completion, ids, tok.Decode(ids, true))
		}
	}
}
