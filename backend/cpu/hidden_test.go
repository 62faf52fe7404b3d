package cpu

import (
	"context"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
)

// TestHidden: the hidden states of the last Forward, put through the LM head, give that
// Forward's logits at every position; a prompt run in two chunks (the second reading the first's
// KV) has the same hidden states as run whole; a sequence's states do not depend on its batch.
func TestHidden(t *testing.T) {
	m := loadFixture(t, "qwen3", "config.json")
	b := newTestBackend(t, m, backend.Options{NumBlocks: 64, BlockSize: 16, Tuning: Tuning{Threads: 2}})
	var prompt []int32 // 21 tokens: two chunks, the first ending inside a block
	for i := range 21 {
		prompt = append(prompt, int32((i*37+5)%b.VocabSize()))
	}
	n, h, vocab := len(prompt), b.HiddenSize(), b.VocabSize()
	table := func(first int) []int32 {
		var t []int32
		for i := range (n + 15) / 16 {
			t = append(t, int32(first+i))
		}
		return t
	}
	ctx := context.Background()
	rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
		{Tokens: prompt, BlockTable: table(0), AllLogits: true},
		{Tokens: prompt[:1], BlockTable: table(8)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	logits := slices.Clone(rows[0])
	whole, err := b.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) != n*h {
		t.Fatalf("hidden states of %d floats, want %d", len(whole), n*h)
	}
	again := make([]float32, n*vocab)
	b.project(b.m.LMHead, []rowGroup{{start: 0, n: n}}, whole, h, again, vocab, false)
	if d := relDiff(t, again, logits); d > 1e-5 {
		t.Fatalf("LM head over the hidden states differs from Forward's logits by %.3g", d)
	}
	// Two chunks, alone in their batches.
	cut := n / 2
	if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[:cut], BlockTable: table(16)}}}); err != nil {
		t.Fatal(err)
	}
	first, err := b.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[cut:], Pos: cut, BlockTable: table(16)}}}); err != nil {
		t.Fatal(err)
	}
	second, err := b.Hidden(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := relDiff(t, append(first, second...), whole); d > 1e-4 {
		t.Fatalf("chunked hidden states differ from the whole prompt's by %.3g", d)
	}
	if _, err := b.Hidden(1, nil); err == nil {
		t.Fatal("Hidden of a seq not in the last forward succeeded")
	}
}
