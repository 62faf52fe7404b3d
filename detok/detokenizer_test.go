package detok

import (
	"testing"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// Step routes each item to its owner with its text, gives every worker the rank's load, trims
// stop strings, and frees a request's state when it finishes; a bad owner fails only its item.
func TestDetokenizerStep(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("hello world, this is a test", false)
	if len(ids) < 4 {
		t.Fatalf("encode gave %v", ids)
	}
	d := NewDetokenizer(tok, 2)
	load := ipc.Load{Running: 2}
	step := func(items ...ipc.TokenItem) []ipc.TextBatch {
		t.Helper()
		out, err := d.Step(&ipc.TokenBatch{Rank: 1, Seq: 7, Load: load, Items: items})
		if err != nil {
			t.Fatal(err)
		}
		for w := range out {
			if len(out[w].Loads) != 1 || out[w].Loads[0].Rank != 1 || out[w].Loads[0].Seq != 7 || out[w].Loads[0].Load.Running != load.Running {
				t.Fatalf("worker %d loads %+v", w, out[w].Loads)
			}
		}
		return out
	}
	var a, b string
	half := len(ids) / 2
	out := step(ipc.TokenItem{RID: "a", Owner: 0, NewIDs: ids[:half]}, ipc.TokenItem{RID: "b", Owner: 1, NewIDs: ids[:half], StopStrings: []string{"this"}})
	if len(out[0].Items) != 1 || len(out[1].Items) != 1 || out[0].Items[0].RID != "a" || out[1].Items[0].RID != "b" {
		t.Fatalf("routing: %+v", out)
	}
	a, b = out[0].Items[0].Text, out[1].Items[0].Text
	out = step(ipc.TokenItem{RID: "a", Owner: 0, NewIDs: ids[half:], Finished: true}, ipc.TokenItem{RID: "b", Owner: 1, NewIDs: ids[half:], Finished: true})
	a, b = a+out[0].Items[0].Text, b+out[1].Items[0].Text
	if want := tok.Decode(ids, true); a != want {
		t.Errorf("a: %q, want %q", a, want)
	}
	if b != "hello world, " {
		t.Errorf("b (stop \"this\"): %q", b)
	}
	if n := d.table.Len(); n != 0 {
		t.Errorf("%d streams left after both finished", n)
	}
	out, err = d.Step(&ipc.TokenBatch{Rank: 1, Items: []ipc.TokenItem{{RID: "c", Owner: 2, NewIDs: ids[:1]}, {RID: "d", Owner: 1, NewIDs: ids[:1]}}})
	if err == nil || len(out[1].Items) != 1 || out[1].Items[0].RID != "d" {
		t.Fatalf("owner out of range: err %v, out %+v", err, out)
	}
}

// TestDetokenizerLostState: an item of a request this detokd has no state for, though earlier
// ids of it went out (a previous detokd process had them), fails the request instead of going
// on with a fresh decoder (lost held-back text and stop strings): no ids, no text, and the
// completion count of what went out before. A first item opens the request as usual.
func TestDetokenizerLostState(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDetokenizer(tok, 1)
	out, err := d.Step(&ipc.TokenBatch{Items: []ipc.TokenItem{
		{RID: "new", NewIDs: []int32{5, 6}, CompletionTokens: 2},
		{RID: "old", NewIDs: []int32{7, 8}, CompletionTokens: 40, StopStrings: nil},
	}})
	if err != nil {
		t.Fatal(err)
	}
	items := out[0].Items
	if len(items) != 2 || items[0].Finished || len(items[0].NewIDs) != 2 {
		t.Fatalf("first item of a new request: %+v", items)
	}
	f := items[1]
	if !f.Finished || f.FinishReason != ipc.FinishError || f.Error != ErrLostState || len(f.NewIDs) != 0 || f.Text != "" || f.CompletionTokens != 38 {
		t.Fatalf("item of a request whose state is lost: %+v", f)
	}
	if d.table.Len() != 1 {
		t.Errorf("%d streams open, want only the new request's", d.table.Len())
	}
}
