package model

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/llmserve/llmserve/gguf"
	"github.com/llmserve/llmserve/quant"
)

// ggufArch is the general.architecture of a family.
func ggufArch(f Family) (string, error) {
	for name, fam := range ggufFamilies {
		if fam == f {
			return name, nil
		}
	}
	return "", fmt.Errorf("no GGUF architecture for %s", f)
}

// ggufFileType is llama.cpp's general.file_type (llama_ftype) of a model whose matrices are all
// stored as t.
var ggufFileType = map[quant.Type]uint32{quant.F32: 0, quant.F16: 1, quant.Q4_0: 2, quant.Q8_0: 7,
	quant.Q4_K: 14, quant.Q6_K: 18, quant.BF16: 32}

// GGUFWriter returns a GGUF writer holding m as llama.cpp's converter lays it out: <arch>.*
// metadata, llama.cpp's tensor names, q/k rows permuted for the llama architecture, norms and
// biases as F32, matrices in their storage types, and Llama 3.1 rope scaling as a rope_freqs
// tensor. The writer views m's weights, which must not change until it is written. The caller
// adds the tokenizer's metadata (tokenizer.SetGGUFMetadata) before writing.
func (m *Model) GGUFWriter() (*gguf.Writer, error) {
	cfg := m.Config
	arch, err := ggufArch(cfg.Architecture)
	if err != nil {
		return nil, err
	}
	w := gguf.NewWriter()
	set := func(k string, v any) {
		if err == nil {
			err = w.Set(k, v)
		}
	}
	set("general.architecture", arch)
	set("general.name", cfg.ModelType)
	t := m.Layers[0].QKV.Type
	uniform := true
	for _, l := range m.Layers {
		for _, mat := range []Matrix{l.QKV, l.O, l.GateUp, l.Down} {
			for _, blk := range mat.Blocks() {
				uniform = uniform && blk.Type == t
			}
		}
	}
	if ft, ok := ggufFileType[t]; ok && uniform {
		set("general.file_type", ft)
	}
	if t.Quantized() {
		set("general.quantization_version", uint32(2))
	}
	set(arch+".context_length", uint32(cfg.MaxPositions))
	set(arch+".embedding_length", uint32(cfg.HiddenSize))
	set(arch+".block_count", uint32(cfg.NumLayers))
	set(arch+".feed_forward_length", uint32(cfg.IntermediateSize))
	set(arch+".attention.head_count", uint32(cfg.NumHeads))
	set(arch+".attention.head_count_kv", uint32(cfg.NumKVHeads))
	set(arch+".attention.key_length", uint32(cfg.HeadDim))
	set(arch+".attention.value_length", uint32(cfg.HeadDim))
	set(arch+".rope.dimension_count", uint32(cfg.HeadDim))
	set(arch+".rope.freq_base", float32(cfg.Rope.Theta))
	set(arch+".attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps))
	// Sampling defaults of generation_config.json, under the keys llama.cpp's converter uses.
	if g := m.Generation; g.DoSample || g.Temperature > 0 || g.TopP > 0 || g.TopK > 0 {
		if g.Temperature > 0 {
			set("general.sampling.temp", float32(g.Temperature))
		}
		if g.TopP > 0 {
			set("general.sampling.top_p", float32(g.TopP))
		}
		if g.TopK > 0 {
			set("general.sampling.top_k", int32(g.TopK))
		}
	}
	if cfg.Rope.Type == RopeLinear {
		set(arch+".rope.scaling.type", "linear")
		set(arch+".rope.scaling.factor", float32(cfg.Rope.Factor))
	}
	if err != nil {
		return nil, err
	}
	if cfg.Rope.Type == RopeLlama3 {
		if err := w.AddTensor("rope_freqs.weight", quant.F32, []uint64{uint64(cfg.HeadDim / 2)},
			f32Bytes(llama3Factors(cfg.Rope.Theta, cfg.HeadDim, cfg.Rope))); err != nil {
			return nil, err
		}
	}
	views := m.tensorViews()
	// specs() resets the matrices of the model it is called on: call it on a shallow copy,
	// whose vectors are still m's.
	shadow := *m
	shadow.Layers = slices.Clone(m.Layers)
	for _, s := range shadow.specs() {
		name, err := ggufName(s.name)
		if err != nil {
			return nil, err
		}
		heads, permuted := permutedRows(cfg, s.name)
		if s.vec != nil {
			// specs() points vec at m's own vectors.
			data := f32Bytes(s.vec)
			if permuted {
				data = f32Bytes(permuteVec(s.vec, heads))
			}
			if err := w.AddTensor(name, quant.F32, []uint64{uint64(len(s.vec))}, data); err != nil {
				return nil, err
			}
			continue
		}
		mat, ok := views[s.name]
		if !ok {
			return nil, fmt.Errorf("no weights for %q", s.name)
		}
		dims := []uint64{uint64(mat.Cols), uint64(mat.Rows)}
		if !permuted {
			if err := w.AddTensor(name, mat.Type, dims, mat.Data); err != nil {
				return nil, err
			}
			continue
		}
		if err := w.AddTensorFunc(name, mat.Type, dims, func(out io.Writer) error {
			for g := range mat.Rows {
				if _, err := out.Write(mat.Row(permutedRow(g, heads, mat.Rows))); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// tensorViews maps each Hugging Face matrix name of m to its weights.
func (m *Model) tensorViews() map[string]Matrix {
	v := map[string]Matrix{"model.embed_tokens.weight": m.Embed}
	if !m.Config.TieWordEmbeddings {
		v["lm_head.weight"] = m.LMHead
	}
	for i, l := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		v[p+"self_attn.q_proj.weight"] = l.Q
		v[p+"self_attn.k_proj.weight"] = l.K
		v[p+"self_attn.v_proj.weight"] = l.V
		v[p+"self_attn.o_proj.weight"] = l.O
		v[p+"mlp.gate_proj.weight"] = l.Gate
		v[p+"mlp.up_proj.weight"] = l.Up
		v[p+"mlp.down_proj.weight"] = l.Down
	}
	return v
}

// permutedRow is the Hugging Face row stored at GGUF row g (the inverse of unpermutedRow).
func permutedRow(g, heads, rows int) int {
	d := rows / heads
	h, w := g/d, g%d
	j, half := w/2, w%2
	return h*d + half*(d/2) + j
}

func permuteVec(v []float32, heads int) []float32 {
	out := make([]float32, len(v))
	for g := range out {
		out[g] = v[permutedRow(g, heads, len(v))]
	}
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
