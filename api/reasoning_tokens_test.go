package api

import (
	"strconv"
	"testing"
)

// TestReasoningTokensCount: the thinking block's tokens, markers included and however they
// are spelled, however the ids are cut into deltas; none when the output does not open it.
func TestReasoningTokensCount(t *testing.T) {
	// ids stand for the texts of this vocabulary
	vocab := textVocab{"<think>", "</think>", "<th", "ink>", "</", "think>", "a", "b\n", "x<"}
	id := func(toks ...string) []int32 {
		var out []int32
		for _, s := range toks {
			for i, v := range vocab {
				if v == s {
					out = append(out, int32(i))
				}
			}
		}
		return out
	}
	for _, c := range []struct {
		openFirst bool
		ids       []int32
		want      int
	}{
		{false, id("<think>", "a", "b\n", "</think>", "a", "a"), 4},
		{false, id("<th", "ink>", "a", "</", "think>", "a"), 5}, // markers spelled in pieces
		{false, id("a", "<think>", "a", "</think>"), 0},         // thinking off: no block
		{false, id("x<", "<think>"), 0},
		{true, id("a", "b\n", "</think>", "a"), 3}, // DeepSeek-R1: the prompt opened it
		{false, id("<think>", "a", "a"), 3},        // cut inside the block
		{false, id("<th"), 0},                      // ended before it could tell
		{true, nil, 0},
	} {
		for cut := 1; cut <= len(c.ids)+1; cut++ {
			r := &reasoningTokens{tok: vocab, openFirst: c.openFirst}
			for i := 0; i < len(c.ids); i += cut {
				r.add(c.ids[i:min(i+cut, len(c.ids))])
			}
			want := `,"completion_tokens_details":{"reasoning_tokens":` + strconv.Itoa(c.want) + `}`
			if got := string(r.appendDetails(nil)); got != want {
				t.Errorf("%v (cut %d): %s, want %s", c.ids, cut, got, want)
			}
		}
	}
	var none *reasoningTokens
	none.add([]int32{1})
	if got := string(none.appendDetails(nil)); got != "" {
		t.Errorf("nil counter wrote %q", got)
	}
}

// textVocab is a vocabulary of token texts, by id.
type textVocab []string

func (v textVocab) TokenBytes(id int32) []byte { return []byte(v[id]) }
