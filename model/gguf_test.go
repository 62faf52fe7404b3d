package model_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/gguf"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
	"github.com/llmserve/llmserve/tokenizer"
)

const fixtures = "../testdata/models"

// writeGGUF writes m (with the tokenizer of tokDir, when given) to a temporary GGUF file.
func writeGGUF(t testing.TB, m *model.Model, tokDir string, edit func(*gguf.Writer)) string {
	t.Helper()
	w, err := m.GGUFWriter()
	if err != nil {
		t.Fatal(err)
	}
	if tokDir != "" {
		if err := tokenizer.SetGGUFMetadata(w, tokDir, m.Config.VocabSize); err != nil {
			t.Fatal(err)
		}
	}
	if edit != nil {
		edit(w)
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// lastLogits runs a prompt through the CPU backend and returns the last position's logits.
func lastLogits(t testing.TB, m *model.Model, prompt []int32) []float32 {
	t.Helper()
	b, err := cpu.New(m, backend.Options{NumBlocks: len(prompt)/cpu.DefaultBlockSize + 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	table := make([]int32, len(prompt)/b.BlockSize()+2)
	for i := range table {
		table[i] = int32(i)
	}
	rows, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, BlockTable: table, Logits: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(rows[0])
}

// expectedPrompts reads the fixture's prompts and Hugging Face's last-position logits.
func expectedPrompts(t testing.TB, dir string) ([][]int32, [][]float32) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Prompts []struct {
			InputIDs   []int32   `json:"input_ids"`
			LastLogits []float32 `json:"last_logits"`
		} `json:"prompts"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	var ids [][]int32
	var logits [][]float32
	for _, p := range e.Prompts {
		ids = append(ids, p.InputIDs)
		logits = append(logits, p.LastLogits)
	}
	return ids, logits
}

// relDiff is max |a-b| over max |b|.
func relDiff(a, b []float32) float64 {
	var md, mb float64
	for i := range b {
		md = max(md, math.Abs(float64(a[i]-b[i])))
		mb = max(mb, math.Abs(float64(b[i])))
	}
	return md / mb
}

func matrices(m *model.Model) map[string]model.Matrix {
	out := map[string]model.Matrix{"embed": m.Embed, "lm_head": m.LMHead}
	for i, l := range m.Layers {
		for name, x := range map[string]model.Matrix{"qkv": l.QKV, "o": l.O, "gateup": l.GateUp, "down": l.Down} {
			out[name+string(rune('0'+i))] = x
		}
	}
	return out
}

func sameWeights(t *testing.T, got, want *model.Model) {
	t.Helper()
	gm, wm := matrices(got), matrices(want)
	for name, w := range wm {
		g := gm[name]
		if g.Type != w.Type || g.Rows != w.Rows || g.Cols != w.Cols || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("matrix %s: %s %dx%d differs from %s %dx%d", name, g.Type, g.Rows, g.Cols, w.Type, w.Rows, w.Cols)
		}
	}
	for i := range want.Layers {
		g, w := got.Layers[i], want.Layers[i]
		for _, p := range [][2][]float32{{g.InputNorm, w.InputNorm}, {g.PostAttnNorm, w.PostAttnNorm},
			{g.QNorm, w.QNorm}, {g.KNorm, w.KNorm}, {g.QKVBias, w.QKVBias}, {g.OBias, w.OBias}} {
			if !slices.Equal(p[0], p[1]) {
				t.Errorf("layer %d: a norm or bias vector differs", i)
			}
		}
	}
	if !slices.Equal(got.Norm, want.Norm) {
		t.Error("final norm differs")
	}
}

// TestGGUFFixtures writes every fixture model as GGUF, loads it back, and checks that the weights
// are the safetensors path's byte for byte and that the logits equal it (and so still meet
// Hugging Face's within the fixture tolerance).
func TestGGUFFixtures(t *testing.T) {
	for _, name := range []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(fixtures, name)
			st, err := model.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			path := writeGGUF(t, st, "", nil)
			g, err := model.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, want := g.Config, st.Config
			// Only what a GGUF does not carry may differ: the declared dtype and model_type,
			// and the special ids (they live in the tokenizer metadata, absent here).
			cfg.DType, want.DType = "", ""
			cfg.BOSTokenID, cfg.HasBOS, cfg.EOSTokenIDs = want.BOSTokenID, want.HasBOS, want.EOSTokenIDs
			if name == "llama32" {
				// The rope parameters are recovered from rope_freqs: the same scale, and a band
				// that gives this head size's frequencies the same factors (the logits below).
				if cfg.Rope.Type != model.RopeLlama3 || cfg.Rope.Factor != want.Rope.Factor {
					t.Errorf("rope %+v, want %+v", cfg.Rope, want.Rope)
				}
				cfg.Rope = want.Rope
			}
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("config\n%+v\nwant\n%+v", cfg, want)
			}
			if lc, err := model.LoadConfig(path); err != nil || lc.NumLayers != want.NumLayers {
				t.Errorf("LoadConfig(gguf) = %+v, %v", lc, err)
			}
			sameWeights(t, g, st)
			prompts, hf := expectedPrompts(t, dir)
			for i, p := range prompts {
				a, b := lastLogits(t, g, p), lastLogits(t, st, p)
				d := relDiff(a, b)
				tol := 0.0
				if name == "llama32" {
					tol = 1e-5 // rope frequencies from fitted parameters, equal to float rounding
				}
				if d > tol {
					t.Errorf("prompt %d: GGUF logits differ from safetensors by %.3g (tolerance %g)", i, d, tol)
				}
				hfTol := 1e-4
				if name == "qwen3-bf16" {
					hfTol = 4e-2 // the reference ran in bf16 arithmetic (as backend/cpu's tests allow)
				}
				if d := relDiff(a, hf[i]); d > hfTol {
					t.Errorf("prompt %d: GGUF logits differ from Hugging Face by %.3g", i, d)
				}
			}
		})
	}
}

// TestGGUFQuantized: a model quantized at load and written as GGUF reads back with the same
// bytes (the llama q/k permutation round-trips quantized rows), and its rows dequantize to within
// the format's error of the original weights.
func TestGGUFQuantized(t *testing.T) {
	for _, tc := range []struct {
		dir string
		typ quant.Type
		tol float64 // max |dequantized - original| over max |original|, per matrix
	}{
		{filepath.Join(fixtures, "llama"), quant.Q8_0, 1.0 / 127},
		{filepath.Join(fixtures, "qwen2"), quant.Q4_0, 1.0 / 7},
		{"../models/pico", quant.Q4_K, 1.0 / 7},
		{"../models/pico", quant.Q6_K, 1.0 / 31},
	} {
		t.Run(filepath.Base(tc.dir)+"-"+tc.typ.String(), func(t *testing.T) {
			orig, err := model.Load(tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			q, err := model.Load(tc.dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := model.Quantize(q, tc.typ); err != nil {
				t.Fatal(err)
			}
			if q.Layers[0].QKV.Type != tc.typ || q.Embed.Type != tc.typ || q.Layers[0].Q.Type != tc.typ {
				t.Fatalf("quantized types %s %s", q.Layers[0].QKV.Type, q.Embed.Type)
			}
			path := writeGGUF(t, q, "", nil)
			g, err := model.LoadGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			sameWeights(t, g, q)
			om, gm := matrices(orig), matrices(g)
			for name, o := range om {
				want := make([]float32, o.Rows*o.Cols)
				got := make([]float32, o.Rows*o.Cols)
				if err := quant.Dequantize(o.Type, o.Data, want); err != nil {
					t.Fatal(err)
				}
				if err := quant.Dequantize(gm[name].Type, gm[name].Data, got); err != nil {
					t.Fatal(err)
				}
				if d := relDiff(got, want); d > tc.tol {
					t.Errorf("%s: dequantized %s differs by %.3g of max |w| (bound %.3g)", name, tc.typ, d, tc.tol)
				}
			}
		})
	}
}

// TestGGUFTokenizerAndErrors: a GGUF with the tokenizer's metadata gives the special ids, and
// unsupported architectures, tensor types and missing tensors are errors naming them.
func TestGGUFTokenizerAndErrors(t *testing.T) {
	pico, err := model.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	path := writeGGUF(t, pico, "../models/pico", nil)
	cfg, err := model.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := model.LoadGenerationConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if gen.Temperature != 0.7 || gen.TopP != 0.9 || !gen.DoSample {
		t.Errorf("sampling defaults from general.sampling.*: %+v", gen)
	}
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	eos, _ := tok.EOS()
	if !slices.Contains(cfg.EOSTokenIDs, eos) || !slices.Equal(gen.EOSTokenIDs, cfg.EOSTokenIDs) {
		t.Errorf("EOS ids %v / %v, tokenizer's %d", cfg.EOSTokenIDs, gen.EOSTokenIDs, eos)
	}
	for _, tc := range []struct {
		edit func(*gguf.Writer)
		want string
	}{
		{func(w *gguf.Writer) { _ = w.Set("general.architecture", "gemma3") }, `"gemma3"`},
		{func(w *gguf.Writer) { _ = w.Set("qwen3.rope.scaling.type", "yarn") }, `"yarn"`},
		{func(w *gguf.Writer) { _ = w.Set("qwen3.attention.head_count", uint32(3)) }, "3 heads"},
		{func(w *gguf.Writer) { _ = w.Set("qwen3.block_count", "six") }, "qwen3.block_count"},
	} {
		p := writeGGUF(t, pico, "", tc.edit)
		if _, err := model.Open(p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want one containing %s", err, tc.want)
		}
	}
	// A tensor of a type this engine does not implement: token_embd.weight's type field set
	// to 13 (q5_k) in the bytes of a written file.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := []byte("token_embd.weight")
	at := bytes.Index(data, name)
	if at < 0 {
		t.Fatal("no token_embd.weight in the file")
	}
	typeAt := at + len(name) + 4 + 2*8
	binary.LittleEndian.PutUint32(data[typeAt:], 13)
	p := filepath.Join(t.TempDir(), "q5k.gguf")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := model.Open(p); err == nil || !strings.Contains(err.Error(), "q5_k") {
		t.Errorf("q5_k tensor: err %v", err)
	}
}

// TestGGUFFromOtherWriter reads a GGUF this package did not write: the qwen3-bf16 fixture as the
// llama.cpp peer's converter (../shared/peers/llamacpp/tools/st2gguf, which llama.cpp itself
// reads) wrote it. Weights and logits must be the safetensors path's exactly.
func TestGGUFFromOtherWriter(t *testing.T) {
	g, err := model.Open("testdata/qwen3-bf16.st2gguf.gguf")
	if err != nil {
		t.Fatal(err)
	}
	st, err := model.Load(filepath.Join(fixtures, "qwen3-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	sameWeights(t, g, st)
	prompts, _ := expectedPrompts(t, filepath.Join(fixtures, "qwen3-bf16"))
	for i, p := range prompts {
		if d := relDiff(lastLogits(t, g, p), lastLogits(t, st, p)); d != 0 {
			t.Errorf("prompt %d: logits differ by %.3g", i, d)
		}
	}
	tok, err := tokenizer.Load("testdata/qwen3-bf16.st2gguf.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 512 {
		t.Errorf("toy vocabulary of %d tokens", tok.VocabSize())
	}
}

// FuzzGGUFModel loads arbitrary bytes as a GGUF model: errors are fine, panics are not. The seeds
// are a small model written by this package, whole and cut short.
func FuzzGGUFModel(f *testing.F) {
	st, err := model.Load(filepath.Join(fixtures, "qwen2"))
	if err != nil {
		f.Fatal(err)
	}
	w, err := st.GGUFWriter()
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:buf.Len()/3])
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "m.gguf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := model.LoadGGUF(path); err == nil && m.Config.Validate() != nil {
			t.Fatalf("loaded a model with an invalid config %+v", m.Config)
		}
	})
}

// TestGGUFMixedGroups: a Q4_K_M-style file whose fused groups mix types (layer 0's v_proj in
// Q6_K, layer 1's up_proj in Q8_0, as llama.cpp's Q4_K_M stores some v and ffn tensors with more
// bits) loads each of those tensors in its own type (Matrix.Parts, not widened to float32), and
// its logits match the same weights widened to float32 within the activation quantization the
// quantized kernels do (on this random model, the fused Q4_K groups differ from their widened
// selves by 3.3% of the largest logit; the parts by 4%: an error in which columns a part fills
// would be of the order of the logits). backend/cpu's TestProjectParts checks the parts exactly.
func TestGGUFMixedGroups(t *testing.T) {
	q, err := model.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	if err := model.Quantize(q, quant.Q4_K); err != nil {
		t.Fatal(err)
	}
	restore := func(w model.Matrix, typ quant.Type, asType quant.Type) model.Matrix {
		vals := make([]float32, w.Rows*w.Cols)
		if err := quant.Dequantize(w.Type, w.Data, vals); err != nil {
			t.Fatal(err)
		}
		data, err := quant.Quantize(typ, vals, w.Cols)
		if err != nil {
			t.Fatal(err)
		}
		if asType == quant.F32 {
			if err := quant.Dequantize(typ, data, vals); err != nil {
				t.Fatal(err)
			}
			data = make([]byte, 4*len(vals))
			for i, v := range vals {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
			typ = quant.F32
		}
		out, err := model.NewMatrix(typ, w.Rows, w.Cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	l0, l1 := &q.Layers[0], &q.Layers[1]
	l0.V = restore(l0.V, quant.Q6_K, quant.Q6_K)
	l0.QKV = model.Matrix{Type: l0.Q.Type, Rows: l0.QKV.Rows, Cols: l0.QKV.Cols, Parts: []model.Matrix{l0.Q, l0.K, l0.V}}
	l1.Up = restore(l1.Up, quant.Q8_0, quant.Q8_0)
	l1.GateUp = model.Matrix{Type: l1.Gate.Type, Rows: l1.GateUp.Rows, Cols: l1.GateUp.Cols, Parts: []model.Matrix{l1.Gate, l1.Up}}
	g, err := model.LoadGGUF(writeGGUF(t, q, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	types := func(m model.Matrix) []quant.Type {
		var ts []quant.Type
		for _, p := range m.Parts {
			ts = append(ts, p.Type)
		}
		return ts
	}
	if got := types(g.Layers[0].QKV); !slices.Equal(got, []quant.Type{quant.Q4_K, quant.Q4_K, quant.Q6_K}) {
		t.Fatalf("layer 0 qkv parts %v, want q4_k q4_k q6_k", got)
	}
	if got := types(g.Layers[1].GateUp); !slices.Equal(got, []quant.Type{quant.Q4_K, quant.Q8_0}) {
		t.Fatalf("layer 1 gate_up parts %v, want q4_k q8_0", got)
	}
	if g.Layers[0].GateUp.Parts != nil || g.Layers[1].QKV.Parts != nil || g.Layers[1].QKV.Type != quant.Q4_K {
		t.Fatal("groups of one type should stay fused")
	}
	for _, pair := range [][2]model.Matrix{{g.Layers[0].V, l0.V}, {g.Layers[0].K, l0.K}, {g.Layers[1].Up, l1.Up}} {
		if pair[0].Type != pair[1].Type || !bytes.Equal(pair[0].Data, pair[1].Data) {
			t.Fatalf("a %s part's bytes differ after the round trip", pair[1].Type)
		}
	}
	// the reference: the same weights, the mixed groups widened to float32 as one matrix each
	wide, err := model.LoadGGUF(writeGGUF(t, q, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	widen := func(m model.Matrix) model.Matrix {
		var data []byte
		for _, p := range m.Parts {
			data = append(data, restore(p, p.Type, quant.F32).Data...)
		}
		out, err := model.NewMatrix(quant.F32, m.Rows, m.Cols, data)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	wl0, wl1 := &wide.Layers[0], &wide.Layers[1]
	wl0.QKV = widen(wl0.QKV)
	wl1.GateUp = widen(wl1.GateUp)
	prompt := []int32{1, 5, 9, 200, 31, 7, 64, 3}
	got, want := lastLogits(t, g, prompt), lastLogits(t, wide, prompt)
	if d := relDiff(got, want); d > 8e-2 {
		t.Errorf("logits with mixed parts differ from the widened weights by %.3g of max |logit| (bound 8e-2)", d)
	} else {
		t.Logf("logits with mixed parts vs widened: %.3g of max |logit|", d)
	}
}

// TestBadMagicNamed: a model path that is a file with a wrong magic is reported as that, by the
// config loader and by the tokenizer loader, not as "x.gguf/config.json: not a directory".
func TestBadMagicNamed(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "x.gguf")
	if err := os.WriteFile(bad, []byte("GGUG\x03\x00\x00\x00"+strings.Repeat("\x00", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := model.LoadConfig(bad)
	if err == nil || !strings.Contains(err.Error(), "bad magic") || strings.Contains(err.Error(), "not a directory") {
		t.Errorf("LoadConfig: %v", err)
	}
	_, err = tokenizer.Load(bad)
	if err == nil || !strings.Contains(err.Error(), "bad magic") || strings.Contains(err.Error(), "not a directory") {
		t.Errorf("tokenizer.Load: %v", err)
	}
}
