package detok

import (
	"strings"
	"testing"
)

// pieceDecoder is the cheapest possible TokenDecoder, so the benchmark
// measures the Stream, not the decoder.
type pieceDecoder []string

func (d pieceDecoder) Add(ids []int32) string {
	if len(ids) == 1 {
		return d[ids[0]]
	}
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d[id])
	}
	return b.String()
}

func (pieceDecoder) Flush() string { return "" }

// BenchmarkPush: one token per Push (the decode-step case); ns/op is
// ns/token. The text keeps producing stop-string prefixes ("<", "\n") that
// must be held and released.
func BenchmarkPush(b *testing.B) {
	dec := pieceDecoder{" the", " model", ",", " <", "br", ">", "\n", " and", " User", ":"}
	for _, bc := range []struct {
		name  string
		stops []string
	}{
		{"no_stops", nil},
		{"2_stops", []string{"<|im_end|>", "\n\nUser:"}},
		{"8_stops", []string{"<|im_end|>", "\n\nUser:", "</s>", "###", "<|eot_id|>", "\n\n\n", "STOP", "<|endoftext|>"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewStream(dec, bc.stops)
			ids := make([]int32, 1)
			i := 0
			for b.Loop() {
				ids[0] = int32(i % len(dec))
				i++
				if _, stopped, _ := s.Push(ids, false); stopped {
					b.Fatal("unexpected stop")
				}
			}
		})
	}
}
