package model

import (
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/llmserve/llmserve/gguf"
	"github.com/llmserve/llmserve/quant"
)

// ggufFamilies maps GGUF's general.architecture to the decoder families.
var ggufFamilies = map[string]Family{"llama": FamilyLlama, "qwen2": FamilyQwen2, "qwen3": FamilyQwen3}

// Open loads the model at path: a GGUF file (LoadGGUF) or a Hugging Face directory (Load).
func Open(path string) (*Model, error) {
	if gguf.IsGGUF(path) {
		return LoadGGUF(path)
	}
	return Load(path)
}

// ggufConfig reads the model configuration and generation defaults from a GGUF file's metadata:
// general.architecture (llama, qwen2 or qwen3) and its <arch>.* keys, the vocabulary size from
// the token list, special ids from tokenizer.ggml.*, and llama.cpp's rope_freqs tensor when the
// file has one (Llama 3.1-style scaling).
func ggufConfig(f *gguf.File) (Config, GenerationConfig, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return Config{}, GenerationConfig{}, err
	}
	family, ok := ggufFamilies[arch]
	if !ok {
		return Config{}, GenerationConfig{}, fmt.Errorf("unsupported GGUF architecture %q (supported: llama, qwen2, qwen3)", arch)
	}
	cfg := Config{Architecture: family, ModelType: arch, RMSNormEps: 1e-5, DType: "gguf"}
	need := func(key string, dst *int) {
		if err != nil {
			return
		}
		var n uint64
		if n, err = f.Uint(arch + "." + key); err == nil && n > math.MaxInt32 {
			err = fmt.Errorf("gguf: %s.%s %d is too large", arch, key, n)
		}
		*dst = int(n)
	}
	optional := func(key string, dst *int) {
		if _, ok := f.Get(arch + "." + key); ok {
			need(key, dst)
		}
	}
	need("block_count", &cfg.NumLayers)
	need("embedding_length", &cfg.HiddenSize)
	need("feed_forward_length", &cfg.IntermediateSize)
	need("attention.head_count", &cfg.NumHeads)
	need("context_length", &cfg.MaxPositions)
	cfg.NumKVHeads = cfg.NumHeads
	optional("attention.head_count_kv", &cfg.NumKVHeads)
	if cfg.NumHeads > 0 {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumHeads
	}
	optional("attention.key_length", &cfg.HeadDim)
	valueLen := cfg.HeadDim
	optional("attention.value_length", &valueLen)
	if err != nil {
		return Config{}, GenerationConfig{}, err
	}
	if valueLen != cfg.HeadDim {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: %s.attention.value_length %d differs from key_length %d, which is not supported", arch, valueLen, cfg.HeadDim)
	}
	if _, ok := f.Get(arch + ".attention.layer_norm_rms_epsilon"); ok {
		if cfg.RMSNormEps, err = ggufFloat(f, arch+".attention.layer_norm_rms_epsilon"); err != nil {
			return Config{}, GenerationConfig{}, err
		}
	}
	if cfg.Rope, err = ggufRope(f, arch, cfg.HeadDim); err != nil {
		return Config{}, GenerationConfig{}, err
	}
	switch family {
	case FamilyQwen2:
		cfg.QKVBias = true
	case FamilyQwen3:
		cfg.QKNorm = true
	}
	if family != FamilyQwen2 {
		_, cfg.AttentionBias = f.Tensor("blk.0.attn_q.bias")
	}
	_, hasOutput := f.Tensor("output.weight")
	cfg.TieWordEmbeddings = !hasOutput
	// The vocabulary is the embedding's rows (the token list may be shorter or absent).
	embd, ok := f.Tensor("token_embd.weight")
	if !ok || len(embd.Dims) != 2 {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: token_embd.weight is missing or not a matrix")
	}
	if embd.Dims[1] > math.MaxInt32 {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: token_embd.weight has %d rows", embd.Dims[1])
	}
	cfg.VocabSize = int(embd.Dims[1])
	// The sizes that buffers are allocated from must agree with tensors the file holds, so that
	// metadata alone cannot make the loader allocate more than the file's own size implies.
	if embd.Dims[0] != uint64(cfg.HiddenSize) {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: token_embd.weight has rows of %d, %s.embedding_length is %d", embd.Dims[0], arch, cfg.HiddenSize)
	}
	if cfg.NumLayers > len(f.Tensors)/7 {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: %s.block_count %d, but the file has only %d tensors", arch, cfg.NumLayers, len(f.Tensors))
	}
	if q, ok := f.Tensor("blk.0.attn_q.weight"); !ok || len(q.Dims) != 2 || q.Dims[1] != uint64(cfg.NumHeads)*uint64(cfg.HeadDim) {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: blk.0.attn_q.weight is missing or not [%d heads x %d]", cfg.NumHeads, cfg.HeadDim)
	}

	var gen GenerationConfig
	id := func(key string) (int32, bool, error) {
		if _, ok := f.Get(key); !ok {
			return 0, false, nil
		}
		n, err := f.Uint(key)
		if err != nil {
			return 0, false, err
		}
		if n >= uint64(cfg.VocabSize) {
			return 0, false, fmt.Errorf("gguf: %s %d is outside the vocabulary of %d", key, n, cfg.VocabSize)
		}
		return int32(n), true, nil
	}
	if cfg.BOSTokenID, cfg.HasBOS, err = id("tokenizer.ggml.bos_token_id"); err != nil {
		return Config{}, GenerationConfig{}, err
	}
	gen.BOSTokenID, gen.HasBOS = cfg.BOSTokenID, cfg.HasBOS
	// End of generation: eos, eot and eom ids, and the end-of-turn tokens llama.cpp recognises by
	// their text, so an instruct model's turn ends where llama.cpp ends it.
	for _, key := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		e, ok, err := id(key)
		if err != nil {
			return Config{}, GenerationConfig{}, err
		}
		if ok && !slices.Contains(cfg.EOSTokenIDs, e) {
			cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, e)
		}
	}
	if toks, err := f.Strings("tokenizer.ggml.tokens"); err == nil {
		for i, t := range toks {
			if i < cfg.VocabSize && slices.Contains(endOfTurnTokens, t) && !slices.Contains(cfg.EOSTokenIDs, int32(i)) {
				cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, int32(i))
			}
		}
	}
	gen.EOSTokenIDs = slices.Clone(cfg.EOSTokenIDs)
	// Sampling defaults, where the file carries them (general.sampling.*).
	if x, err := ggufFloat(f, "general.sampling.temp"); err == nil && x >= 0 {
		gen.Temperature, gen.DoSample = x, x > 0
	}
	if x, err := ggufFloat(f, "general.sampling.top_p"); err == nil && x > 0 && x <= 1 {
		gen.TopP = x
	}
	if n, err := f.Uint("general.sampling.top_k"); err == nil && n <= math.MaxInt32 {
		gen.TopK = int(n)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, GenerationConfig{}, fmt.Errorf("gguf: %w", err)
	}
	return cfg, gen, nil
}

// ggufFloat reads a number; a float32 is taken as the shortest decimal that rounds to it (1e-6,
// not 9.99999997e-07), the value the converter was given.
func ggufFloat(f *gguf.File, key string) (float64, error) {
	x, err := f.Float(key)
	if err != nil {
		return 0, err
	}
	if v, _ := f.Get(key); v.Type == gguf.TypeFloat32 {
		x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
	}
	return x, nil
}

// endOfTurnTokens are token texts llama.cpp treats as ending generation whatever the ids say.
var endOfTurnTokens = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|eom_id|>", "<end_of_turn>", "<|endoftext|>"}

// ggufRope reads the rotary setup: <arch>.rope.freq_base, linear scaling from
// <arch>.rope.scaling.*, and Llama-3-style scaling from the rope_freqs tensor llama.cpp's
// converter writes in its place (its parameters are recovered from the per-frequency factors).
func ggufRope(f *gguf.File, arch string, headDim int) (Rope, error) {
	rope := Rope{Theta: 10000, Type: RopeDefault, Factor: 1}
	if _, ok := f.Get(arch + ".rope.freq_base"); ok {
		var err error
		if rope.Theta, err = ggufFloat(f, arch+".rope.freq_base"); err != nil {
			return Rope{}, err
		}
	}
	if !(rope.Theta > 0) {
		return Rope{}, fmt.Errorf("gguf: %s.rope.freq_base %v must be positive", arch, rope.Theta)
	}
	if n, err := f.Uint(arch + ".rope.dimension_count"); err == nil && int(n) != headDim {
		return Rope{}, fmt.Errorf("gguf: %s.rope.dimension_count %d differs from the head size %d (partial rotary is not supported)", arch, n, headDim)
	}
	scaling := "none"
	if _, ok := f.Get(arch + ".rope.scaling.type"); ok {
		var err error
		if scaling, err = f.String(arch + ".rope.scaling.type"); err != nil {
			return Rope{}, err
		}
	}
	switch scaling {
	case "none":
	case "linear":
		factor, err := ggufFloat(f, arch+".rope.scaling.factor")
		if err != nil {
			return Rope{}, err
		}
		if factor != 1 {
			if !(factor > 0) {
				return Rope{}, fmt.Errorf("gguf: %s.rope.scaling.factor %v must be positive", arch, factor)
			}
			rope.Type, rope.Factor = RopeLinear, factor
		}
	default:
		return Rope{}, fmt.Errorf("gguf: %s.rope.scaling.type %q is not supported (supported: none, linear)", arch, scaling)
	}
	info, ok := f.Tensor("rope_freqs.weight")
	if !ok {
		return rope, nil
	}
	if rope.Type != RopeDefault {
		return Rope{}, fmt.Errorf("gguf: rope_freqs.weight together with %s rope scaling is not supported", scaling)
	}
	if info.Type != quant.F32 || len(info.Dims) != 1 || info.Dims[0] != uint64(headDim/2) {
		return Rope{}, fmt.Errorf("gguf: rope_freqs.weight is %s%v, want f32[%d]", gguf.TypeName(info.Type), info.Dims, headDim/2)
	}
	raw, err := f.TensorData(info)
	if err != nil {
		return Rope{}, err
	}
	factors := make([]float32, headDim/2)
	if err := quant.Dequantize(quant.F32, raw, factors); err != nil {
		return Rope{}, err
	}
	orig := 8192 // what llama.cpp's converter assumes when the config does not say
	if n, err := f.Uint(arch + ".rope.scaling.original_context_length"); err == nil && n > 0 && n <= math.MaxInt32 {
		orig = int(n)
	}
	return fitLlama3Rope(rope.Theta, headDim, factors, orig)
}

// llama3Factors is llama.cpp's converter's rope_freqs: for each rotary frequency, the factor its
// wavelength is stretched by under Llama 3.1's scaling.
func llama3Factors(theta float64, headDim int, r Rope) []float32 {
	out := make([]float32, headDim/2)
	lowWavelen := float64(r.OriginalMaxPositions) / r.LowFreqFactor
	highWavelen := float64(r.OriginalMaxPositions) / r.HighFreqFactor
	for i := range out {
		freq := 1 / math.Pow(theta, float64(2*i)/float64(headDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(r.Factor)
		default:
			smooth := (float64(r.OriginalMaxPositions)/wavelen - r.LowFreqFactor) / (r.HighFreqFactor - r.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/r.Factor + smooth))
		}
	}
	return out
}

// fitLlama3Rope recovers Llama 3.1 rope parameters from per-frequency factors: the largest factor
// is the scale, and the band between unscaled and fully scaled frequencies, where the factor
// interpolates linearly in 1/wavelength, gives low_freq_factor and high_freq_factor for the given
// original context. The fit must reproduce every factor, or the file is refused.
func fitLlama3Rope(theta float64, headDim int, factors []float32, orig int) (Rope, error) {
	scale := float64(slices.Max(factors))
	if scale == 1 && slices.Min(factors) == 1 {
		return Rope{Theta: theta, Type: RopeDefault, Factor: 1}, nil
	}
	// In the band, smooth s = (1/f - 1/scale) / (1 - 1/scale) is linear in x = 1/wavelength:
	// s = (orig·x - low) / (high - low), 0 at x = low/orig and 1 at x = high/orig. Frequencies
	// above the band (x > high/orig) are unscaled, those below it fully scaled.
	var xs, ss []float64
	xOne, xFull := math.Inf(1), 0.0 // smallest unscaled x, largest fully scaled x
	for i, fa := range factors {
		x := 1 / math.Pow(theta, float64(2*i)/float64(headDim)) / (2 * math.Pi)
		switch {
		case math.Abs(float64(fa)-1) < 1e-6:
			xOne = min(xOne, x)
		case math.Abs(float64(fa)-scale) < 1e-6*scale:
			xFull = max(xFull, x)
		default:
			xs = append(xs, x)
			ss = append(ss, (1/float64(fa)-1/scale)/(1-1/scale))
		}
	}
	var xa, xb float64 // the band's edges in x
	switch len(xs) {
	case 0:
		// No frequency in the band: any edges between the neighbours reproduce the factors.
		if math.IsInf(xOne, 1) {
			xOne = 4 * xFull
		}
		xa, xb = xFull+(xOne-xFull)/3, xFull+2*(xOne-xFull)/3
	case 1:
		// One point: a line through it steep enough to keep the neighbours outside the band.
		x1, s1 := xs[0], ss[0]
		a := s1 / (x1 - xFull)
		if !math.IsInf(xOne, 1) {
			a = max(a, (1-s1)/(xOne-x1))
		}
		a *= 2
		xa, xb = x1-s1/a, x1+(1-s1)/a
	default:
		a := (ss[len(ss)-1] - ss[0]) / (xs[len(xs)-1] - xs[0])
		b := ss[0] - a*xs[0]
		xa, xb = -b/a, (1-b)/a
	}
	lowOverOrig, highOverOrig := xa, xb
	r := Rope{Theta: theta, Type: RopeLlama3, Factor: scale, OriginalMaxPositions: orig,
		LowFreqFactor: lowOverOrig * float64(orig), HighFreqFactor: highOverOrig * float64(orig)}
	if !(r.LowFreqFactor > 0) || !(r.HighFreqFactor > r.LowFreqFactor) {
		return Rope{}, fmt.Errorf("gguf: rope_freqs.weight is not Llama 3 rope scaling")
	}
	for i, fa := range llama3Factors(theta, headDim, r) {
		if math.Abs(float64(fa-factors[i])) > 1e-4*float64(factors[i]) {
			return Rope{}, fmt.Errorf("gguf: rope_freqs.weight[%d] = %v does not follow Llama 3 rope scaling (fit gives %v)", i, factors[i], fa)
		}
	}
	return r, nil
}

// ggufTensorNames are the GGUF names of the per-layer tensors, by Hugging Face suffix.
var ggufTensorNames = map[string]string{
	"input_layernorm.weight":          "attn_norm.weight",
	"self_attn.q_proj.weight":         "attn_q.weight",
	"self_attn.k_proj.weight":         "attn_k.weight",
	"self_attn.v_proj.weight":         "attn_v.weight",
	"self_attn.q_proj.bias":           "attn_q.bias",
	"self_attn.k_proj.bias":           "attn_k.bias",
	"self_attn.v_proj.bias":           "attn_v.bias",
	"self_attn.q_norm.weight":         "attn_q_norm.weight",
	"self_attn.k_norm.weight":         "attn_k_norm.weight",
	"self_attn.o_proj.weight":         "attn_output.weight",
	"self_attn.o_proj.bias":           "attn_output.bias",
	"post_attention_layernorm.weight": "ffn_norm.weight",
	"mlp.gate_proj.weight":            "ffn_gate.weight",
	"mlp.up_proj.weight":              "ffn_up.weight",
	"mlp.down_proj.weight":            "ffn_down.weight",
}

// ggufName is the GGUF tensor name of a Hugging Face checkpoint tensor name.
func ggufName(hf string) (string, error) {
	switch hf {
	case "model.embed_tokens.weight":
		return "token_embd.weight", nil
	case "model.norm.weight":
		return "output_norm.weight", nil
	case "lm_head.weight":
		return "output.weight", nil
	}
	var layer int
	var rest string
	if n, _ := fmt.Sscanf(hf, "model.layers.%d.%s", &layer, &rest); n == 2 {
		if g, ok := ggufTensorNames[rest]; ok {
			return fmt.Sprintf("blk.%d.%s", layer, g), nil
		}
	}
	return "", fmt.Errorf("no GGUF name for tensor %q", hf)
}

// permutedRows reports whether a tensor's rows are in llama.cpp's interleaved rotary order: the
// converter permutes the q and k projections (and biases) of the llama architecture, whose
// llama.cpp rope rotates adjacent pairs, and leaves qwen2/qwen3 (rotating halves) alone. It
// returns the number of heads the rows are grouped in.
func permutedRows(cfg Config, hf string) (int, bool) {
	if cfg.Architecture != FamilyLlama {
		return 0, false
	}
	switch {
	case hasSuffix(hf, "self_attn.q_proj.weight"), hasSuffix(hf, "self_attn.q_proj.bias"):
		return cfg.NumHeads, true
	case hasSuffix(hf, "self_attn.k_proj.weight"), hasSuffix(hf, "self_attn.k_proj.bias"):
		return cfg.NumKVHeads, true
	}
	return 0, false
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// unpermutedRow maps a Hugging Face row index of a q or k projection to the GGUF row holding it:
// within each head of d rows, llama.cpp stores row half·d/2+j at 2j+half.
func unpermutedRow(r, heads, rows int) int {
	d := rows / heads
	h, w := r/d, r%d
	half, j := w/(d/2), w%(d/2)
	return h*d + 2*j + half
}

// LoadGGUF reads a llama.cpp GGUF model file: the configuration from its metadata and the weights
// as views of the memory-mapped file, each matrix in its stored type (F32, F16, BF16, Q8_0, Q4_0,
// Q4_K, Q6_K). Groups the model fuses (q/k/v, gate/up) are copied into one matrix; a group whose
// tensors differ in type (q/k/v of a Q4_K_M file) keeps each in its own type (Matrix.Parts). The
// file stays mapped while any matrix views it.
func LoadGGUF(path string) (*Model, error) {
	start := time.Now()
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load model: %w", err)
	}
	m, viewed, err := modelFromGGUF(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load model %s: %w", path, err)
	}
	if !viewed {
		if err := f.Close(); err != nil {
			return nil, fmt.Errorf("load model %s: %w", path, err)
		}
	}
	cfg := m.Config
	slog.Info("loaded model", "path", path, "format", f.Describe(), "architecture", cfg.Architecture,
		"layers", cfg.NumLayers, "hidden", cfg.HiddenSize, "vocab", cfg.VocabSize, "weights", m.Layers[0].QKV.Type,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// modelFromGGUF builds the model of an open GGUF file; viewed reports whether any matrix views
// the file's mapping (so it must stay open).
func modelFromGGUF(f *gguf.File) (*Model, bool, error) {
	cfg, gen, err := ggufConfig(f)
	if err != nil {
		return nil, false, err
	}
	m := allocate(cfg)
	m.Generation = gen
	specs := m.specs()
	infos := make([]gguf.TensorInfo, len(specs))
	types := map[*Matrix]quant.Type{}
	mixed := map[*Matrix]bool{} // fused groups whose tensors differ in type: kept as Parts
	for i, s := range specs {
		name, err := ggufName(s.name)
		if err != nil {
			return nil, false, err
		}
		info, ok := f.Tensor(name)
		if !ok {
			return nil, false, fmt.Errorf("missing tensor %q (want shape %v)", name, s.shape)
		}
		if !slices.Equal(info.Shape(), s.shape) {
			return nil, false, fmt.Errorf("tensor %q has shape %v, want %v", name, info.Shape(), s.shape)
		}
		if !info.Type.Known() {
			return nil, false, fmt.Errorf("tensor %q has type %s, which is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)", name, gguf.TypeName(info.Type))
		}
		infos[i] = info
		if s.mat != nil {
			if prev, ok := types[s.mat]; ok && prev != info.Type {
				mixed[s.mat] = true
			} else if !ok {
				types[s.mat] = info.Type
			}
		}
	}
	viewed := false
	for i, s := range specs {
		info := infos[i]
		raw, err := f.TensorData(info)
		if err != nil {
			return nil, false, err
		}
		heads, permuted := permutedRows(cfg, s.name)
		if s.vec != nil {
			if err := quant.Dequantize(info.Type, raw, s.vec); err != nil {
				return nil, false, fmt.Errorf("tensor %q: %w", info.Name, err)
			}
			if permuted {
				src := slices.Clone(s.vec)
				for r := range s.vec {
					s.vec[r] = src[unpermutedRow(r, heads, len(src))]
				}
			}
			continue
		}
		if mixed[s.mat] {
			// one part per tensor, in its own type (specs list a group's tensors in row order)
			part := Matrix{Type: info.Type, Rows: s.shape[0], Cols: s.shape[1], Data: raw}
			if permuted {
				part.Data = make([]byte, len(raw))
				copyRows(part.Data, raw, part.Rows, heads)
			} else {
				viewed = true
			}
			s.mat.Parts = append(s.mat.Parts, part)
			s.mat.Type = s.mat.Parts[0].Type
			continue
		}
		t := types[s.mat]
		s.mat.Type = t
		rb, err := t.RowBytes(s.mat.Cols)
		if err != nil {
			return nil, false, fmt.Errorf("tensor %q: %w", info.Name, err)
		}
		if !s.fused && !permuted && t == info.Type {
			s.mat.Data = raw
			viewed = true
			continue
		}
		if s.mat.Data == nil {
			s.mat.Data = make([]byte, s.mat.Rows*rb)
		}
		rows := s.shape[0]
		dst := s.mat.Data[s.row*rb : (s.row+rows)*rb]
		if permuted {
			copyRows(dst, raw, rows, heads)
		} else {
			copy(dst, raw)
		}
	}
	m.finishViews()
	return m, viewed, nil
}

// copyRows copies the rows of a q or k projection from a GGUF tensor's bytes (raw) to dst in
// Hugging Face's order (see unpermutedRow).
func copyRows(dst, raw []byte, rows, heads int) {
	rb := len(raw) / rows
	for r := range rows {
		sr := unpermutedRow(r, heads, rows)
		copy(dst[r*rb:(r+1)*rb], raw[sr*rb:(sr+1)*rb])
	}
}

// loadGGUFConfig reads the configuration of the GGUF file at path.
func loadGGUFConfig(path string) (Config, GenerationConfig, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return Config{}, GenerationConfig{}, fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	cfg, gen, err := ggufConfig(f)
	if err != nil {
		return Config{}, GenerationConfig{}, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, gen, nil
}
