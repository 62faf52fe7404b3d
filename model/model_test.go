package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/quant"
)

const fixtureDir = "../testdata/models"

func TestLoadConfigBothFormats(t *testing.T) {
	for _, name := range []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"} {
		dir := filepath.Join(fixtureDir, name)
		old, err := LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, "config.v5.json"))
		if err != nil {
			t.Fatal(err)
		}
		v5, err := ParseConfig(data)
		if err != nil {
			t.Fatalf("%s config.v5.json: %v", name, err)
		}
		// Only the declared dtype spelling may differ between the two files.
		old.DType, v5.DType = "", ""
		if !configsEqual(old, v5) {
			t.Errorf("%s: config.json and config.v5.json disagree:\n%+v\n%+v", name, old, v5)
		}
	}
	llama32, err := LoadConfig(filepath.Join(fixtureDir, "llama32"))
	if err != nil {
		t.Fatal(err)
	}
	wantRope := Rope{Theta: 500000, Type: RopeLlama3, Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}
	if llama32.Rope != wantRope || !llama32.TieWordEmbeddings || llama32.HeadDim != 16 {
		t.Errorf("llama32 config: %+v", llama32)
	}
	qwen3, err := LoadConfig(filepath.Join(fixtureDir, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	if qwen3.HeadDim != 32 || qwen3.QDim() != 128 || !qwen3.QKNorm || qwen3.Rope.Theta != 1e6 || qwen3.QKVBias {
		t.Errorf("qwen3 config: %+v", qwen3)
	}
	qwen2, err := LoadConfig(filepath.Join(fixtureDir, "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	if !qwen2.QKVBias || qwen2.AttentionBias || qwen2.TieWordEmbeddings || qwen2.NumKVHeads != 2 {
		t.Errorf("qwen2 config: %+v", qwen2)
	}
}

func configsEqual(a, b Config) bool {
	return reflect.DeepEqual(a, b)
}

func TestParseConfigDefaultsAndErrors(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,
		"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10,"eos_token_id":[3,4],"bos_token_id":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumKVHeads != 4 || cfg.HeadDim != 16 || cfg.Rope.Theta != 10000 || cfg.Rope.Type != RopeDefault ||
		!slices.Equal(cfg.EOSTokenIDs, []int32{3, 4}) || cfg.HasBOS || cfg.RMSNormEps != 1e-6 {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	base := `"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":10`
	for _, tc := range []struct{ json, wantErr string }{
		{`{"architectures":["MistralForCausalLM"],` + base + `}`, "MistralForCausalLM"},
		{`{"architectures":[],` + base + `}`, "no architectures"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"rope_type":"yarn","factor":4}}`, `"yarn"`},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_parameters":{"rope_type":"dynamic","rope_theta":1}}`, `"dynamic"`},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"rope_scaling":{"rope_type":"llama3","factor":8}}`, "llama3"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"num_key_value_heads":3}`, "multiple"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"hidden_act":"gelu"}`, "gelu"},
		{`{"architectures":["LlamaForCausalLM"],` + base + `,"eos_token_id":"x"}`, "eos_token_id"},
		{`{"architectures":["LlamaForCausalLM"],"hidden_size":64}`, "intermediate_size"},
		{`[1,2]`, "decode"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseConfig(%s) = %v, want error containing %q", tc.json, err, tc.wantErr)
		}
	}
}

func TestLoadGenerationConfig(t *testing.T) {
	gc, err := LoadGenerationConfig("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gc.EOSTokenIDs, []int32{0, 2}) || gc.Temperature != 0.7 || gc.TopP != 0.9 || !gc.DoSample {
		t.Errorf("pico generation config: %+v", gc)
	}
	gc, err = LoadGenerationConfig(filepath.Join(fixtureDir, "llama"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gc.EOSTokenIDs, []int32{2}) || gc.BOSTokenID != 1 || !gc.HasBOS {
		t.Errorf("llama generation config: %+v", gc)
	}
	gc, err = LoadGenerationConfig(t.TempDir())
	if err != nil || gc.EOSTokenIDs != nil || gc.Temperature != 0 {
		t.Errorf("missing file: %+v, %v", gc, err)
	}
}

// TestLoadFixtures loads every fixture and spot-checks weights against the raw file bytes.
func TestLoadFixtures(t *testing.T) {
	for _, name := range []string{"llama", "llama32", "qwen2", "qwen3", "qwen3-bf16"} {
		m, err := Load(filepath.Join(fixtureDir, name))
		if err != nil {
			t.Fatal(err)
		}
		f, err := OpenSafetensors(filepath.Join(fixtureDir, name, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		q, err := f.Float32("model.layers.1.self_attn.q_proj.weight")
		if err != nil {
			t.Fatal(err)
		}
		if got := matrixFloat32(t, m.Layers[1].Q); !slices.Equal(got, q) {
			t.Errorf("%s: layer 1 q_proj does not match the file", name)
		}
		wantType := quant.F32
		if name == "qwen3-bf16" {
			wantType = quant.BF16
		}
		for what, mat := range map[string]Matrix{"qkv": m.Layers[0].QKV, "o": m.Layers[0].O, "gate_up": m.Layers[1].GateUp,
			"down": m.Layers[1].Down, "embed": m.Embed, "lm_head": m.LMHead} {
			if mat.Type != wantType {
				t.Errorf("%s: %s stored as %s, want %s (the checkpoint's type)", name, what, mat.Type, wantType)
			}
		}
		tied := &m.LMHead.Data[0] == &m.Embed.Data[0]
		if tied != m.Config.TieWordEmbeddings {
			t.Errorf("%s: lm_head tied=%v, config says %v", name, tied, m.Config.TieWordEmbeddings)
		}
		if (m.Layers[0].QNorm != nil) != (name == "qwen3" || name == "qwen3-bf16") {
			t.Errorf("%s: q_norm presence wrong", name)
		}
		if (m.Layers[0].QKVBias != nil) != (name == "qwen2") {
			t.Errorf("%s: qkv bias presence wrong", name)
		}
		_ = f.Close()
	}
	pico, err := Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	if pico.Config.NumLayers != 6 || len(pico.Layers) != 6 || pico.Embed.Rows != 8192 || pico.Embed.Cols != 256 {
		t.Errorf("pico: %+v", pico.Config)
	}
}

// writeSafetensors writes tensors (all F32 unless dtypes says otherwise) in sorted name order.
func writeSafetensors(t testing.TB, path string, tensors map[string][]float32, shapes map[string][]int) {
	t.Helper()
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, name := range slices.Sorted(maps.Keys(tensors)) {
		begin := len(data)
		for _, v := range tensors[name] {
			data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
		}
		header[name] = map[string]any{"dtype": "F32", "shape": shapes[name], "data_offsets": []int{begin, len(data)}}
	}
	writeRaw(t, path, header, data)
}

func writeRaw(t testing.TB, path string, header any, data []byte) {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureTensors reads every tensor of a fixture as float32 with its shape.
func fixtureTensors(t testing.TB, name string) (map[string][]float32, map[string][]int) {
	t.Helper()
	f, err := OpenSafetensors(filepath.Join(fixtureDir, name, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tensors, shapes := map[string][]float32{}, map[string][]int{}
	for _, ti := range f.Header.Tensors {
		if tensors[ti.Name], err = f.Float32(ti.Name); err != nil {
			t.Fatal(err)
		}
		shapes[ti.Name] = ti.Shape
	}
	return tensors, shapes
}

// modelDir writes a model directory with the fixture's config and the given tensors.
func modelDir(t testing.TB, fixture string, tensors map[string][]float32, shapes map[string][]int) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(fixtureDir, fixture, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), tensors, shapes)
	return dir
}

func TestLoadSharded(t *testing.T) {
	tensors, shapes := fixtureTensors(t, "qwen2")
	dir := modelDir(t, "qwen2", map[string][]float32{}, map[string][]int{})
	if err := os.Remove(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	// Split the tensors over three shards by name.
	shards := []map[string][]float32{{}, {}, {}}
	weightMap := map[string]string{}
	for i, name := range slices.Sorted(maps.Keys(tensors)) {
		shards[i%3][name] = tensors[name]
		weightMap[name] = []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}[i%3]
	}
	for i, s := range shards {
		writeSafetensors(t, filepath.Join(dir, []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}[i]), s, shapes)
	}
	index, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	sharded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := Load(filepath.Join(fixtureDir, "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sharded.LMHead.Data, whole.LMHead.Data) || !slices.Equal(sharded.Layers[1].QKVBias, whole.Layers[1].QKVBias) ||
		!bytes.Equal(sharded.Layers[0].GateUp.Data, whole.Layers[0].GateUp.Data) || !slices.Equal(sharded.Norm, whole.Norm) {
		t.Error("sharded load differs from single-file load")
	}

	// An index pointing outside the directory is refused.
	bad, _ := json.Marshal(map[string]any{"weight_map": map[string]string{"model.norm.weight": "../evil.safetensors"}})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "evil") {
		t.Errorf("path-escaping shard name: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	tensors, shapes := fixtureTensors(t, "qwen3")

	missing := maps.Clone(tensors)
	delete(missing, "model.layers.1.self_attn.k_norm.weight")
	_, err := Load(modelDir(t, "qwen3", missing, shapes))
	if err == nil || !strings.Contains(err.Error(), `"model.layers.1.self_attn.k_norm.weight"`) || !strings.Contains(err.Error(), "[32]") {
		t.Errorf("missing tensor: %v", err)
	}

	wrong := maps.Clone(shapes)
	wrong["model.layers.0.self_attn.q_proj.weight"] = []int{64, 128} // transposed
	_, err = Load(modelDir(t, "qwen3", tensors, wrong))
	if err == nil || !strings.Contains(err.Error(), "q_proj.weight") || !strings.Contains(err.Error(), "want [128 64]") {
		t.Errorf("wrong shape: %v", err)
	}

	// Untied Llama without lm_head.
	llamaTensors, llamaShapes := fixtureTensors(t, "llama")
	delete(llamaTensors, "lm_head.weight")
	_, err = Load(modelDir(t, "llama", llamaTensors, llamaShapes))
	if err == nil || !strings.Contains(err.Error(), `"lm_head.weight"`) {
		t.Errorf("missing lm_head: %v", err)
	}

	dir := modelDir(t, "qwen3", tensors, shapes)
	cfg, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	cfg = []byte(strings.Replace(string(cfg), "Qwen3ForCausalLM", "GPT2LMHeadModel", 1))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "GPT2LMHeadModel") {
		t.Errorf("unknown architecture: %v", err)
	}

	if _, err := Load(t.TempDir()); err == nil {
		t.Error("empty directory loaded")
	}
}

func TestHalfToFloat32(t *testing.T) {
	for _, tc := range []struct {
		h    uint16
		want float32
	}{
		{0x3c00, 1}, {0xc000, -2}, {0x7bff, 65504}, {0x0001, 5.960464477539063e-08}, {0x8000, float32(math.Copysign(0, -1))},
		{0x3555, 0.333251953125}, {0x0400, 6.103515625e-05}, {0x7c00, float32(math.Inf(1))},
	} {
		if got := HalfToFloat32(tc.h); got != tc.want || math.Signbit(float64(got)) != math.Signbit(float64(tc.want)) {
			t.Errorf("HalfToFloat32(%#04x) = %v, want %v", tc.h, got, tc.want)
		}
	}
	if v := HalfToFloat32(0x7e00); v == v {
		t.Error("NaN did not stay NaN")
	}
	// BF16 round trip through the rounding helper.
	for _, f := range []float32{1, -3.5, 0.1, 1e-30, 3e38} {
		b := Float32ToBF16(f)
		back := math.Float32frombits(uint32(b) << 16)
		if math.Abs(float64(back-f)) > math.Abs(float64(f))/128 {
			t.Errorf("bf16(%v) = %v", f, back)
		}
	}
}

func TestNewRandom(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join(fixtureDir, "qwen2"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewRandom(cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewRandom(cfg, 42)
	c, _ := NewRandom(cfg, 43)
	if !bytes.Equal(a.Layers[1].Down.Data, b.Layers[1].Down.Data) || !slices.Equal(a.Layers[0].QKVBias, b.Layers[0].QKVBias) {
		t.Error("same seed gave different weights")
	}
	if bytes.Equal(a.Layers[1].Down.Data, c.Layers[1].Down.Data) {
		t.Error("different seeds gave the same weights")
	}
	bound := float32(math.Sqrt(3.0 / 160))
	for _, v := range matrixFloat32(t, a.Layers[0].Down) {
		if v < -bound || v > bound {
			t.Fatalf("down_proj weight %v outside ±%v", v, bound)
		}
	}
	if _, err := NewRandom(Config{}, 1); err == nil {
		t.Error("zero config accepted")
	}
}

// matrixFloat32 widens a float matrix to float32, row by row.
func matrixFloat32(t testing.TB, m Matrix) []float32 {
	t.Helper()
	out := make([]float32, m.Rows*m.Cols)
	for i := range m.Rows {
		if err := RowFloat32(m, i, out[i*m.Cols:(i+1)*m.Cols]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestNewRandomBF16 checks that a bfloat16 config gives BF16 matrices whose values are the
// float32 draws rounded, and that q/k/v are views of the fused matrix.
func TestNewRandomBF16(t *testing.T) {
	cfg, err := LoadConfig(filepath.Join(fixtureDir, "qwen3-bf16"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DType = "bfloat16"
	m, err := NewRandom(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[1]
	if l.QKV.Type != quant.BF16 || m.Embed.Type != quant.BF16 || l.Down.Type != quant.BF16 {
		t.Fatalf("types %s %s %s, want bf16", l.QKV.Type, m.Embed.Type, l.Down.Type)
	}
	if &l.K.Data[0] != &l.QKV.Data[l.Q.Rows*l.QKV.RowBytes()] || &l.Up.Data[0] != &l.GateUp.Data[l.Gate.Rows*l.GateUp.RowBytes()] {
		t.Error("k/up are not views of the fused matrices")
	}
	for _, v := range matrixFloat32(t, l.V) {
		if Float32ToBF16(v) != uint16(math.Float32bits(v)>>16) || math.Float32bits(v)&0xffff != 0 {
			t.Fatalf("%v is not a bf16 value", v)
		}
	}
	cfg.DType = "float16"
	h, err := NewRandom(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	if h.Layers[0].GateUp.Type != quant.F16 {
		t.Errorf("float16 config gave %s", h.Layers[0].GateUp.Type)
	}
}

// TestFloat32ToHalf checks every binary16 value round-trips and that rounding is to nearest
// even, including into subnormals and up to infinity.
func TestFloat32ToHalf(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		if f != f {
			if g := HalfToFloat32(Float32ToHalf(f)); g == g {
				t.Fatalf("NaN %#04x did not stay NaN", h)
			}
			continue
		}
		if got := Float32ToHalf(f); got != uint16(h) {
			t.Fatalf("Float32ToHalf(HalfToFloat32(%#04x) = %v) = %#04x", h, f, got)
		}
	}
	for _, tc := range []struct {
		f    float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},                  // tie, rounds to even (down)
		{1 + 3.0/2048, 0x3c02},                  // tie, rounds to even (up)
		{65520, 0x7c00},                         // rounds up to infinity
		{65519, 0x7bff},                         // stays finite
		{float32(math.Ldexp(1, -25)), 0x0000},   // half the smallest subnormal: tie to even zero
		{float32(math.Ldexp(1.5, -25)), 0x0001}, // above the tie
		{1e-10, 0}, {-1e10, 0xfc00},
	} {
		if got := Float32ToHalf(tc.f); got != tc.want {
			t.Errorf("Float32ToHalf(%v) = %#04x, want %#04x", tc.f, got, tc.want)
		}
	}
}

// TestLoadMixedTypes loads a checkpoint whose k_proj is F16 while q and v are F32:
// the fused QKV falls back to float32 with every value exact, and a lone F16 matrix stays F16.
func TestLoadMixedTypes(t *testing.T) {
	tensors, shapes := fixtureTensors(t, "qwen3")
	dir := modelDir(t, "qwen3", tensors, shapes)
	// Rewrite with layer 0's k_proj and down_proj as F16.
	header := map[string]any{}
	var data []byte
	half := map[string]bool{"model.layers.0.self_attn.k_proj.weight": true, "model.layers.0.mlp.down_proj.weight": true}
	for _, name := range slices.Sorted(maps.Keys(tensors)) {
		begin := len(data)
		dt := "F32"
		for _, v := range tensors[name] {
			if half[name] {
				data = binary.LittleEndian.AppendUint16(data, Float32ToHalf(v))
				dt = "F16"
			} else {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			}
		}
		header[name] = map[string]any{"dtype": dt, "shape": shapes[name], "data_offsets": []int{begin, len(data)}}
	}
	writeRaw(t, filepath.Join(dir, "model.safetensors"), header, data)
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Layers[0]
	if l.QKV.Type != quant.F32 || l.Down.Type != quant.F16 || m.Layers[1].QKV.Type != quant.F32 {
		t.Fatalf("types: qkv %s, down %s", l.QKV.Type, l.Down.Type)
	}
	k := matrixFloat32(t, l.K)
	for i, v := range tensors["model.layers.0.self_attn.k_proj.weight"] {
		if k[i] != HalfToFloat32(Float32ToHalf(v)) {
			t.Fatalf("k_proj[%d] = %v, want %v", i, k[i], HalfToFloat32(Float32ToHalf(v)))
		}
	}
	q := matrixFloat32(t, l.Q)
	if !slices.Equal(q, tensors["model.layers.0.self_attn.q_proj.weight"]) {
		t.Error("q_proj changed")
	}
}

// Quantizing at load unmaps the checkpoint the source matrices viewed: the source weights do
// not stay resident beside the quantized ones.
func TestQuantizeReleasesSource(t *testing.T) {
	m, err := Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.files) == 0 {
		t.Fatal("pico's BF16 matrices should view its mapped safetensors file")
	}
	f := m.files[0]
	if err := Quantize(m, quant.Q8_0); err != nil {
		t.Fatal(err)
	}
	if len(m.files) != 0 || f.data != nil {
		t.Fatalf("after quantizing, %d files stay mapped", len(m.files))
	}
	if m.Layers[0].QKV.Type != quant.Q8_0 || m.LMHead.Type != quant.Q8_0 {
		t.Fatalf("types %v %v", m.Layers[0].QKV.Type, m.LMHead.Type)
	}
}
