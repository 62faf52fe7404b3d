// Package model reads Hugging Face causal-LM directories (config.json, generation_config.json,
// safetensors weights) of the Llama, Qwen2 and Qwen3 families into weights, kept in their stored
// precision, that the backends run.
package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/llmserve/llmserve/gguf"
)

// Family is a decoder variant; the families share one forward pass and differ only in the options
// recorded on Config (biases, per-head norms).
type Family string

// The supported families, keyed by the Hugging Face architecture class that selects them.
const (
	FamilyLlama Family = "LlamaForCausalLM"
	FamilyQwen2 Family = "Qwen2ForCausalLM"
	FamilyQwen3 Family = "Qwen3ForCausalLM"
)

// RopeType names how rotary inverse frequencies are derived from RopeTheta.
type RopeType string

// The supported rope types. Anything else is rejected by LoadConfig rather than silently run with
// the wrong positions.
const (
	RopeDefault RopeType = "default"
	RopeLinear  RopeType = "linear"
	RopeLlama3  RopeType = "llama3"
)

// Rope is the rotary position embedding setup, merged from the long-standing top-level
// rope_theta/rope_scaling keys or the transformers-5 rope_parameters object.
type Rope struct {
	Theta float64
	Type  RopeType
	// Factor scales positions (linear) or low frequencies (llama3).
	Factor float64
	// LowFreqFactor, HighFreqFactor and OriginalMaxPositions are the llama3 smoothing band.
	LowFreqFactor        float64
	HighFreqFactor       float64
	OriginalMaxPositions int
}

// Config is a decoder's shape and options, read from config.json.
type Config struct {
	Architecture      Family
	ModelType         string
	HiddenSize        int
	IntermediateSize  int
	NumLayers         int
	NumHeads          int
	NumKVHeads        int
	HeadDim           int
	RMSNormEps        float64
	VocabSize         int
	MaxPositions      int
	TieWordEmbeddings bool
	// AttentionBias gives q/k/v/o projections a bias (Llama, Qwen3 when attention_bias is set).
	AttentionBias bool
	// QKVBias gives only q/k/v projections a bias (always on for Qwen2).
	QKVBias bool
	// QKNorm applies a per-head RMSNorm to queries and keys before RoPE (Qwen3).
	QKNorm bool
	Rope   Rope
	// DType is the checkpoint's declared storage type (torch_dtype or dtype), informational only:
	// the actual tensor types come from the safetensors headers.
	DType       string
	BOSTokenID  int32
	HasBOS      bool
	EOSTokenIDs []int32
}

// rawConfig mirrors the config.json keys this package understands, in both formats.
type rawConfig struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias         bool            `json:"attention_bias"`
	MLPBias               bool            `json:"mlp_bias"`
	HiddenAct             string          `json:"hidden_act"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           *rawRope        `json:"rope_scaling"`
	RopeParameters        *rawRope        `json:"rope_parameters"`
	TorchDType            string          `json:"torch_dtype"`
	DType                 string          `json:"dtype"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
}

// rawRope is rope_scaling (long-standing) or rope_parameters (transformers 5). Old checkpoints
// spell rope_type as "type".
type rawRope struct {
	RopeTheta                     *float64 `json:"rope_theta"`
	RopeType                      string   `json:"rope_type"`
	Type                          string   `json:"type"`
	Factor                        *float64 `json:"factor"`
	LowFreqFactor                 *float64 `json:"low_freq_factor"`
	HighFreqFactor                *float64 `json:"high_freq_factor"`
	OriginalMaxPositionEmbeddings int      `json:"original_max_position_embeddings"`
}

// LoadConfig reads dir/config.json, or the metadata of a GGUF file in place of dir.
func LoadConfig(dir string) (Config, error) {
	if gguf.IsGGUF(dir) {
		cfg, _, err := loadGGUFConfig(dir)
		return cfg, err
	}
	if err := gguf.CheckNotFile(dir); err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes the contents of a config.json and validates the result.
func ParseConfig(data []byte) (Config, error) {
	var raw rawConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("decode config.json: %w", err)
	}
	if len(raw.Architectures) == 0 {
		return Config{}, errors.New("config.json lists no architectures")
	}
	arch := Family(raw.Architectures[0])
	cfg := Config{
		Architecture:     arch,
		ModelType:        raw.ModelType,
		HiddenSize:       raw.HiddenSize,
		IntermediateSize: raw.IntermediateSize,
		NumLayers:        raw.NumHiddenLayers,
		NumHeads:         raw.NumAttentionHeads,
		NumKVHeads:       raw.NumAttentionHeads,
		RMSNormEps:       1e-6,
		VocabSize:        raw.VocabSize,
		MaxPositions:     raw.MaxPositionEmbeddings,
		DType:            raw.TorchDType,
	}
	if raw.DType != "" {
		cfg.DType = raw.DType
	}
	if raw.NumKeyValueHeads != nil {
		cfg.NumKVHeads = *raw.NumKeyValueHeads
	}
	if raw.HeadDim != nil && *raw.HeadDim > 0 {
		cfg.HeadDim = *raw.HeadDim
	} else if raw.NumAttentionHeads > 0 {
		cfg.HeadDim = raw.HiddenSize / raw.NumAttentionHeads
	}
	if raw.RMSNormEps != nil {
		cfg.RMSNormEps = *raw.RMSNormEps
	}
	// transformers defaults tie_word_embeddings to false for all three families.
	switch arch {
	case FamilyLlama:
		cfg.TieWordEmbeddings = boolOr(raw.TieWordEmbeddings, false)
		cfg.AttentionBias = raw.AttentionBias
	case FamilyQwen2:
		cfg.TieWordEmbeddings = boolOr(raw.TieWordEmbeddings, false)
		cfg.QKVBias = true
		if raw.UseSlidingWindow {
			return Config{}, errors.New("Qwen2 use_sliding_window is not supported")
		}
	case FamilyQwen3:
		cfg.TieWordEmbeddings = boolOr(raw.TieWordEmbeddings, false)
		cfg.AttentionBias = raw.AttentionBias
		cfg.QKNorm = true
		if raw.UseSlidingWindow {
			return Config{}, errors.New("Qwen3 use_sliding_window is not supported")
		}
	default:
		return Config{}, fmt.Errorf("unsupported architecture %q (supported: %s, %s, %s)",
			arch, FamilyLlama, FamilyQwen2, FamilyQwen3)
	}
	if raw.MLPBias {
		return Config{}, errors.New("mlp_bias is not supported")
	}
	if raw.HiddenAct != "" && raw.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("hidden_act %q is not supported (only silu)", raw.HiddenAct)
	}
	rope, err := parseRope(raw)
	if err != nil {
		return Config{}, err
	}
	cfg.Rope = rope
	if cfg.BOSTokenID, cfg.HasBOS, err = parseOptionalID(raw.BOSTokenID); err != nil {
		return Config{}, fmt.Errorf("bos_token_id: %w", err)
	}
	if cfg.EOSTokenIDs, err = parseIDList(raw.EOSTokenID); err != nil {
		return Config{}, fmt.Errorf("eos_token_id: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// parseRope merges the two spellings of the rotary setup. rope_parameters wins when both exist,
// since transformers 5 writes it and reads it first.
func parseRope(raw rawConfig) (Rope, error) {
	rope := Rope{Theta: 10000, Type: RopeDefault, Factor: 1}
	if raw.RopeTheta != nil {
		rope.Theta = *raw.RopeTheta
	}
	params := raw.RopeParameters
	if params == nil {
		params = raw.RopeScaling
	}
	if params != nil {
		if params.RopeTheta != nil {
			rope.Theta = *params.RopeTheta
		}
		typ := params.RopeType
		if typ == "" {
			typ = params.Type
		}
		if typ != "" {
			rope.Type = RopeType(typ)
		}
		if params.Factor != nil {
			rope.Factor = *params.Factor
		}
		if params.LowFreqFactor != nil {
			rope.LowFreqFactor = *params.LowFreqFactor
		}
		if params.HighFreqFactor != nil {
			rope.HighFreqFactor = *params.HighFreqFactor
		}
		rope.OriginalMaxPositions = params.OriginalMaxPositionEmbeddings
	}
	if !(rope.Theta > 0) {
		return Rope{}, fmt.Errorf("rope_theta %v must be positive", rope.Theta)
	}
	switch rope.Type {
	case RopeDefault:
	case RopeLinear:
		if !(rope.Factor > 0) {
			return Rope{}, fmt.Errorf("linear rope factor %v must be positive", rope.Factor)
		}
	case RopeLlama3:
		if !(rope.Factor > 0) || !(rope.LowFreqFactor > 0) || !(rope.HighFreqFactor > rope.LowFreqFactor) ||
			rope.OriginalMaxPositions <= 0 {
			return Rope{}, fmt.Errorf("llama3 rope needs factor > 0, 0 < low_freq_factor < high_freq_factor and "+
				"original_max_position_embeddings > 0; got factor %v, low %v, high %v, original %d",
				rope.Factor, rope.LowFreqFactor, rope.HighFreqFactor, rope.OriginalMaxPositions)
		}
	default:
		return Rope{}, fmt.Errorf("unsupported rope type %q (supported: %s, %s, %s)",
			rope.Type, RopeDefault, RopeLinear, RopeLlama3)
	}
	return rope, nil
}

// Validate checks that the shape is usable by a backend.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumLayers}, {"num_attention_heads", c.NumHeads},
		{"num_key_value_heads", c.NumKVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.VocabSize},
	} {
		if f.v <= 0 {
			return fmt.Errorf("config %s is %d, must be positive", f.name, f.v)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for rotary embeddings", c.HeadDim)
	}
	if !(c.RMSNormEps > 0) {
		return fmt.Errorf("rms_norm_eps %v must be positive", c.RMSNormEps)
	}
	return nil
}

// QDim is the width of the query projection's output (heads × head_dim).
func (c Config) QDim() int { return c.NumHeads * c.HeadDim }

// KVDim is the width of the key and of the value projection's output.
func (c Config) KVDim() int { return c.NumKVHeads * c.HeadDim }

// GenerationConfig holds the defaults from generation_config.json.
type GenerationConfig struct {
	EOSTokenIDs []int32
	BOSTokenID  int32
	HasBOS      bool
	// Temperature, TopP and TopK are zero when the file does not set them.
	Temperature float64
	TopP        float64
	TopK        int
	DoSample    bool
}

type rawGenerationConfig struct {
	BOSTokenID  json.RawMessage `json:"bos_token_id"`
	EOSTokenID  json.RawMessage `json:"eos_token_id"`
	Temperature float64         `json:"temperature"`
	TopP        float64         `json:"top_p"`
	TopK        int             `json:"top_k"`
	DoSample    bool            `json:"do_sample"`
}

// EOSTokenIDs is the ids that end generation for the model in dir whose config.json is cfg:
// generation_config.json's eos_token_id when it names any, else cfg's. The error is that of a
// generation_config.json that cannot be read; the ids returned with it are cfg's.
func EOSTokenIDs(dir string, cfg Config) ([]int32, error) {
	gc, err := LoadGenerationConfig(dir)
	if err != nil || len(gc.EOSTokenIDs) == 0 {
		return cfg.EOSTokenIDs, err
	}
	return gc.EOSTokenIDs, nil
}

// LoadGenerationConfig reads dir/generation_config.json. A missing file yields the zero value,
// since many checkpoints ship without one. A GGUF file in place of dir gives its metadata's.
func LoadGenerationConfig(dir string) (GenerationConfig, error) {
	if gguf.IsGGUF(dir) {
		_, gc, err := loadGGUFConfig(dir)
		return gc, err
	}
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return GenerationConfig{}, nil
	}
	if err != nil {
		return GenerationConfig{}, fmt.Errorf("load generation config: %w", err)
	}
	var raw rawGenerationConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return GenerationConfig{}, fmt.Errorf("load generation config %s: %w", path, err)
	}
	gc := GenerationConfig{Temperature: raw.Temperature, TopP: raw.TopP, TopK: raw.TopK, DoSample: raw.DoSample}
	if gc.BOSTokenID, gc.HasBOS, err = parseOptionalID(raw.BOSTokenID); err != nil {
		return GenerationConfig{}, fmt.Errorf("load generation config %s: bos_token_id: %w", path, err)
	}
	if gc.EOSTokenIDs, err = parseIDList(raw.EOSTokenID); err != nil {
		return GenerationConfig{}, fmt.Errorf("load generation config %s: eos_token_id: %w", path, err)
	}
	return gc, nil
}

// parseIDList accepts a token id, a list of ids, or null/absent.
func parseIDList(raw json.RawMessage) ([]int32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []int32
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
	} else {
		var id int32
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, err
		}
		list = []int32{id}
	}
	if slices.ContainsFunc(list, func(id int32) bool { return id < 0 }) {
		return nil, fmt.Errorf("negative token id in %s", raw)
	}
	return list, nil
}

// parseOptionalID accepts a token id or null/absent. A one-element list is accepted too, since
// some checkpoints write bos_token_id that way.
func parseOptionalID(raw json.RawMessage) (int32, bool, error) {
	ids, err := parseIDList(raw)
	if err != nil {
		return 0, false, err
	}
	switch len(ids) {
	case 0:
		return 0, false, nil
	case 1:
		return ids[0], true, nil
	default:
		return 0, false, fmt.Errorf("want one token id, got %d", len(ids))
	}
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
