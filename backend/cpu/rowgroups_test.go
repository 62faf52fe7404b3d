package cpu

import (
	"reflect"
	"testing"

	"github.com/llmserve/llmserve/backend"
)

// TestRowGroups: by default Generated chunks stream and prompt chunks take the row-stable
// product, whatever their lengths, consecutive chunks of one kind sharing a product (batch and
// chunking invariance); BatchDependent puts every row of the step into one product.
func TestRowGroups(t *testing.T) {
	seqs := []backend.Seq{
		{Tokens: make([]int32, 1), Generated: true},
		{Tokens: make([]int32, 3), Generated: true}, // a speculative step
		{Tokens: make([]int32, 40)},                 // a long prompt chunk
		{Tokens: make([]int32, 2)},                  // a short one
		{Tokens: make([]int32, 1), Generated: true},
	}
	n := func(i int) int { return len(seqs[i].Tokens) }
	path := func(i int) int { return chunkPath(&seqs[i]) }
	var b Backend
	got := b.rowGroups(nil, len(seqs), n, path)
	want := []rowGroup{{start: 0, n: 4, path: pathRows}, {start: 4, n: 42, path: pathStable}, {start: 46, n: 1, path: pathRows}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("batch-invariant groups %+v, want %+v", got, want)
	}
	b.batchDependent = true
	got = b.rowGroups(nil, len(seqs), n, path)
	want = []rowGroup{{start: 0, n: 47, path: pathFast}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("batch-dependent groups %+v, want %+v", got, want)
	}
}
