package api

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/llmserve/llmserve/metrics"
)

// FuzzEmbeddingInputs: the input parser never panics, refuses only with a client error, and
// whatever it accepts is 1 to MaxEmbeddingInputs inputs of 1 to ContextLength non-negative ids.
func FuzzEmbeddingInputs(f *testing.F) {
	for _, seed := range []string{`"text"`, `["a","b"]`, `[1,2,3]`, `[[1,2],[3]]`, `[]`, `[[]]`, `[[1],"x"]`, `["x",[1]]`,
		`5`, `null`, `{}`, `[1,"x"]`, `[[1,2,3,4,5,6,7,8,9]]`, `[-1]`, `[[1e3]]`, `["\u0000"]`, `[[1,2],[3,[4]]]`} {
		f.Add([]byte(seed))
	}
	s, err := NewServer(Config{ServedModelName: "m", ContextLength: 8, StreamInterval: 1, SkipTokenizerInit: true},
		&feedEngine{}, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		inputs, err := s.parseEmbeddingInputs(raw)
		if err != nil {
			var bre *BadRequestError
			if !errors.As(err, &bre) {
				t.Fatalf("%q: refused with %T %v, not a client error", raw, err, err)
			}
			return
		}
		if len(inputs) < 1 || len(inputs) > MaxEmbeddingInputs {
			t.Fatalf("%q: %d inputs", raw, len(inputs))
		}
		for i, ids := range inputs {
			if len(ids) < 1 || len(ids) > 8 {
				t.Fatalf("%q: input %d has %d ids", raw, i, len(ids))
			}
			for _, id := range ids {
				if id < 0 {
					t.Fatalf("%q: input %d has id %d", raw, i, id)
				}
			}
		}
	})
}

// TestFinishEmbedding: a Matryoshka prefix is renormalized to unit length; normalization off
// leaves the prefix as pooled; a zero vector stays zero.
func TestFinishEmbedding(t *testing.T) {
	v := finishEmbedding([]float32{3, 4, 12}, 2, true)
	if len(v) != 2 || math.Abs(float64(v[0])-0.6) > 1e-7 || math.Abs(float64(v[1])-0.8) > 1e-7 {
		t.Errorf("prefix of 2, normalized: %v", v)
	}
	if v := finishEmbedding([]float32{3, 4, 12}, 0, false); len(v) != 3 || v[2] != 12 {
		t.Errorf("whole, not normalized: %v", v)
	}
	if v := finishEmbedding([]float32{0, 0}, 0, true); v[0] != 0 || v[1] != 0 {
		t.Errorf("zero vector: %v", v)
	}
	if err := checkVector([]float32{1, float32(math.NaN())}, 2, 0); err == nil {
		t.Error("a NaN vector passed")
	}
	if err := checkVector([]float32{1, 2}, 3, 0); err == nil {
		t.Error("a vector of the wrong size passed")
	}
}
