package cpu

import (
	"context"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend"
)

// TestAllLogits: a chunk with AllLogits returns the logits of every position, each equal to
// the last-position logits of a forward over that prefix alone, and the first and last equal
// transformers' reference; a plain Logits sequence in the same batch is unaffected.
func TestAllLogits(t *testing.T) {
	ref := loadReference(t, "qwen3")
	m := loadFixture(t, "qwen3", "config.json")
	b := newTestBackend(t, m, backend.Options{NumBlocks: 64, BlockSize: 16, Tuning: Tuning{Threads: 2}})
	prompt := ref.Prompts[0].InputIDs
	n := len(prompt)
	vocab := b.VocabSize()
	table := func(first int) []int32 {
		var t []int32
		for i := range (n + 15) / 16 {
			t = append(t, int32(first+i))
		}
		return t
	}
	rows, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
		{Tokens: prompt, BlockTable: table(0), AllLogits: true, Logits: true},
		{Tokens: prompt, BlockTable: table(8), Logits: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Clone(rows[0])
	last := slices.Clone(rows[1])
	if len(all) != n*vocab || len(last) != vocab {
		t.Fatalf("rows of %d and %d floats, want %d and %d", len(all), len(last), n*vocab, vocab)
	}
	if d := relDiff(t, all[(n-1)*vocab:], last); d > 1e-5 {
		t.Fatalf("last row differs from the plain sequence's by %.3g", d)
	}
	if d := relDiff(t, all[:vocab], ref.Prompts[0].FirstLogits); d > tolerance(ref) {
		t.Fatalf("first row differs from the reference by %.3g", d)
	}
	if d := relDiff(t, last, ref.Prompts[0].LastLogits); d > tolerance(ref) {
		t.Fatalf("last row differs from the reference by %.3g", d)
	}
	for j := 1; j < n-1; j += 3 {
		rows, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt[:j+1], BlockTable: table(16), Logits: true}}})
		if err != nil {
			t.Fatal(err)
		}
		if d := relDiff(t, all[j*vocab:(j+1)*vocab], rows[0]); d > 1e-4 {
			t.Fatalf("position %d differs from the prefix's own forward by %.3g", j, d)
		}
	}
}
