package cpu

import (
	"github.com/llmserve/llmserve/backend"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// quantizeModel returns a copy of m whose matrices are stored as t (row views rebuilt).
func quantizeModel(t *testing.T, m *model.Model, typ quant.Type) *model.Model {
	t.Helper()
	q := *m
	conv := func(w model.Matrix) model.Matrix {
		vals := make([]float32, w.Rows*w.Cols)
		for i := range w.Rows {
			if err := model.RowFloat32(w, i, vals[i*w.Cols:(i+1)*w.Cols]); err != nil {
				t.Fatal(err)
			}
		}
		data, err := quant.Quantize(typ, vals, w.Cols)
		if err != nil {
			t.Fatal(err)
		}
		out, err := model.NewMatrix(typ, w.Rows, w.Cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	q.Embed = conv(m.Embed)
	q.LMHead = q.Embed
	if !m.Config.TieWordEmbeddings {
		q.LMHead = conv(m.LMHead)
	}
	q.Layers = make([]model.Layer, len(m.Layers))
	cfg := m.Config
	for i, l := range m.Layers {
		l.QKV, l.O, l.GateUp, l.Down = conv(l.QKV), conv(l.O), conv(l.GateUp), conv(l.Down)
		l.Q, l.K, l.V = model.RowRange(l.QKV, 0, cfg.QDim()), model.RowRange(l.QKV, cfg.QDim(), cfg.QDim()+cfg.KVDim()), model.RowRange(l.QKV, cfg.QDim()+cfg.KVDim(), cfg.QDim()+2*cfg.KVDim())
		l.Gate, l.Up = model.RowRange(l.GateUp, 0, cfg.IntermediateSize), model.RowRange(l.GateUp, cfg.IntermediateSize, 2*cfg.IntermediateSize)
		q.Layers[i] = l
	}
	return &q
}

// TestQuantizedWeights runs the qwen3 fixture with its matrices quantized to Q8_0 (through
// package quant's kernels) against the transformers reference. Q8_0 keeps about 8 significant
// bits per weight and the kernels quantize activations to 8 bits too, so the logits land within
// a few percent of the float32 reference, not to float32 precision; the KV cache follows llama.cpp
// (F16) under auto.
func TestQuantizedWeights(t *testing.T) {
	ref := loadReference(t, "qwen3")
	m := quantizeModel(t, loadFixture(t, "qwen3", "config.json"), quant.Q8_0)
	b := newTestBackend(t, m, backend.Options{NumBlocks: 64})
	if b.KVCacheDType() != backend.KVF16 {
		t.Errorf("auto KV cache for q8_0 weights is %v, want f16", b.KVCacheDType())
	}
	pool := newBlockPool(b.NumBlocks(), 5)
	var worst float64
	for p, prompt := range ref.Prompts {
		s := newSeqRun(prompt.InputIDs, 5, 2, 0)
		runSeqs(t, b, pool, []*seqRun{s})
		worst = max(worst, relDiff(t, s.Prefill, ref.Prompts[p].LastLogits))
	}
	if worst > 5e-2 {
		t.Errorf("q8_0: last logits within %.3g of the reference, want <= 5e-2", worst)
	}
	if testing.Verbose() {
		t.Logf("q8_0: worst last-logit difference %.3g", worst)
	}
}

// TestProjectParts: a matrix of row blocks in different types (a Q4_K_M file's mixed q/k/v)
// projects each block into its own columns of the output, exactly as the block alone would,
// for decode and prefill shapes, with and without accumulation.
func TestProjectParts(t *testing.T) {
	b := newTestBackend(t, loadFixture(t, "qwen3", "config.json"), backend.Options{NumBlocks: 8})
	const cols = 256
	rng := rand.New(rand.NewPCG(3, 4))
	part := func(typ quant.Type, rows int) model.Matrix {
		vals := make([]float32, rows*cols)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64())
		}
		data, err := quant.Quantize(typ, vals, cols)
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.NewMatrix(typ, rows, cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	parts := []model.Matrix{part(quant.Q4_K, 96), part(quant.Q6_K, 32), part(quant.Q8_0, 40), part(quant.BF16, 24)}
	total := 0
	for _, p := range parts {
		total += p.Rows
	}
	w := model.Matrix{Type: parts[0].Type, Rows: total, Cols: cols, Parts: parts}
	for _, m := range []int{1, 3, 37} {
		for _, acc := range []bool{false, true} {
			x := make([]float32, m*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			ldo := total + 5
			got := make([]float32, m*ldo)
			for i := range got {
				got[i] = float32(i % 7)
			}
			want := slices.Clone(got)
			b.project(w, []rowGroup{{start: 0, n: m}}, x, cols, got, ldo, acc)
			off := 0
			for _, p := range parts {
				alone := make([]float32, m*p.Rows)
				for i := range m {
					copy(alone[i*p.Rows:(i+1)*p.Rows], want[i*ldo+off:])
				}
				b.mul.MatMul(p, m, x, cols, alone, p.Rows, acc)
				for i := range m {
					copy(want[i*ldo+off:], alone[i*p.Rows:(i+1)*p.Rows])
				}
				off += p.Rows
			}
			if !slices.Equal(got, want) {
				t.Fatalf("m=%d accumulate=%v: the parts' products differ from each part alone", m, acc)
			}
		}
	}
}
