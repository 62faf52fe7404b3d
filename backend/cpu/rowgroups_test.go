package cpu

import (
	"reflect"
	"testing"

	"github.com/llmserve/llmserve/backend"
)

// TestRowGroups: by default Generated chunks and short prompt chunks stream, consecutive ones
// sharing a product, and a long prompt chunk takes a product of its own (batch invariance);
// Deterministic puts every prompt chunk on the row-stable product, whatever its length, consecutive
// ones sharing it (chunking invariance too); BatchDependent puts every row of the step into one
// product.
func TestRowGroups(t *testing.T) {
	seqs := []backend.Seq{
		{Tokens: make([]int32, 1), Generated: true},
		{Tokens: make([]int32, 3), Generated: true}, // a speculative step
		{Tokens: make([]int32, 40)},                 // a long prompt chunk
		{Tokens: make([]int32, 40)},                 // another
		{Tokens: make([]int32, 2)},                  // a short one
		{Tokens: make([]int32, 1), Generated: true},
	}
	var b Backend
	n := func(i int) int { return len(seqs[i].Tokens) }
	path := func(i int) int { return b.chunkPath(&seqs[i], n(i)) }
	check := func(mode string, want []rowGroup) {
		t.Helper()
		if got := b.rowGroups(nil, len(seqs), n, path); !reflect.DeepEqual(got, want) {
			t.Errorf("%s groups %+v, want %+v", mode, got, want)
		}
	}
	check("batch-invariant", []rowGroup{{0, 4, pathRows}, {4, 40, pathOwn}, {44, 40, pathOwn}, {84, 3, pathRows}})
	b.deterministic = true
	check("deterministic", []rowGroup{{0, 4, pathRows}, {4, 82, pathStable}, {86, 1, pathRows}})
	b.deterministic, b.batchDependent = false, true
	check("batch-dependent", []rowGroup{{0, 87, pathFast}})
}
