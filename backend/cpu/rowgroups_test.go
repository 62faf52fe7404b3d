package cpu

import (
	"reflect"
	"testing"

	"github.com/llmserve/llmserve/backend/cpu/linear"
)

// TestRowGroups: by default decodes and short chunks multiply row by row and a long chunk alone
// (batch invariance); BatchDependent puts every row of the step into one product.
func TestRowGroups(t *testing.T) {
	long := linear.StreamMaxRows + 8
	lens := []int{1, 1, long, 1}
	n := func(i int) int { return lens[i] }
	short := func(i int) bool { return lens[i] <= linear.StreamMaxRows }
	var b Backend
	got := b.rowGroups(nil, len(lens), n, short)
	want := []rowGroup{{start: 0, n: 2, rowwise: true}, {start: 2, n: long}, {start: 2 + long, n: 1, rowwise: true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("batch-invariant groups %+v, want %+v", got, want)
	}
	b.batchDependent = true
	got = b.rowGroups(nil, len(lens), n, short)
	want = []rowGroup{{start: 0, n: 3 + long}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("batch-dependent groups %+v, want %+v", got, want)
	}
}
