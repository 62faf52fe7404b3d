package backendtest

import (
	"context"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
)

// testHiddenStates, for a backend with backend.HiddenStates (embeddings): Hidden returns
// len(Tokens) rows of HiddenSize for each Seq of the last Forward, with or without logits; a
// prompt in two chunks, batched with another sequence, has the hidden states of the prompt run
// whole and alone (within Consistency); an index outside the last batch is refused.
func testHiddenStates(t *testing.T, tg Target) {
	m := Pico(t)
	b := open(t, tg, m, 64, 4)
	hs, ok := b.(backend.HiddenStates)
	if !ok {
		t.Skip("the backend returns no hidden states")
	}
	h := hs.HiddenSize()
	if h != m.Config.HiddenSize {
		t.Fatalf("HiddenSize %d, the model's is %d", h, m.Config.HiddenSize)
	}
	ctx := context.Background()
	prompt := tokens(21, m.Config.VocabSize, 7)
	other := tokens(5, m.Config.VocabSize, 8)
	if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, BlockTable: []int32{0, 1, 2, 3, 4, 5}}}}); err != nil {
		t.Fatal(err)
	}
	whole, err := hs.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole = slices.Clone(whole)
	if len(whole) != len(prompt)*h {
		t.Fatalf("%d hidden floats for %d tokens of %d", len(whole), len(prompt), h)
	}
	// The same prompt in blocks 10.., in two chunks (the first ending inside a block), each
	// behind another sequence that asks for logits.
	table := []int32{10, 11, 12, 13, 14, 15}
	var chunked []float32
	for _, c := range [][2]int{{0, 9}, {9, len(prompt)}} {
		if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
			{Tokens: other, BlockTable: []int32{30, 31}, Logits: true},
			{Tokens: prompt[c[0]:c[1]], Pos: c[0], BlockTable: table},
		}}); err != nil {
			t.Fatal(err)
		}
		rows, err := hs.Hidden(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != (c[1]-c[0])*h {
			t.Fatalf("chunk [%d, %d): %d hidden floats", c[0], c[1], len(rows))
		}
		chunked = append(chunked, rows...)
		if _, err := hs.Hidden(2, nil); err == nil {
			t.Fatal("Hidden of a Seq outside the last batch succeeded")
		}
	}
	compare(t, "hidden states in two batched chunks against the prompt whole and alone", chunked, whole, tg.Consistency)
}
