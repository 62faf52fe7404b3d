package main

import "testing"

func TestLookupShare(t *testing.T) {
	cases := []struct {
		prompt, out []int32
		want        float64
	}{
		// A copy of the prompt: after the first token, every next token follows the same 3-gram.
		{[]int32{1, 2, 3, 4, 5, 6}, []int32{1, 2, 3, 4}, 0.75},
		// Nothing recurs.
		{[]int32{1, 2, 3}, []int32{4, 5, 6}, 0},
		// A loop: 7 8 7 8 7 8 is guessed from the second 8 on (the first 7 to recur is followed
		// by the 8 that is then guessed).
		{[]int32{9}, []int32{7, 8, 7, 8, 7, 8}, 0.5},
		// The longest suffix decides: after "1 2" the 2-gram says 3 although the 1-gram "2" last
		// continued with 9.
		{[]int32{1, 2, 3, 2, 9, 1, 2}, []int32{3}, 1},
	}
	for _, c := range cases {
		if got := lookupShare(c.prompt, c.out); got != c.want {
			t.Errorf("lookupShare(%v, %v) = %v, want %v", c.prompt, c.out, got, c.want)
		}
	}
}

func TestSameIDs(t *testing.T) {
	rs := []result{
		{model: "m", workload: "w", engine: "off", ids: []int32{1, 2, 3}},
		{model: "m", workload: "w", engine: "llama.cpp", ids: []int32{9, 9, 9}},
		{model: "m", workload: "w", engine: "ngram", ids: []int32{1, 2, 3}},
	}
	if s, ok := sameIDs(rs, "m", "w"); !ok {
		t.Fatalf("identical ids reported as %q", s)
	}
	rs = append(rs, result{model: "m", workload: "w", engine: "ngram", ids: []int32{1, 5, 3}})
	if s, ok := sameIDs(rs, "m", "w"); ok || s != "**NO**: off and ngram differ at output token 1 (of 3 / 3)" {
		t.Fatalf("differing ids reported as %q, %v", s, ok)
	}
}
