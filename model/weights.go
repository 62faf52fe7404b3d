package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Layer holds one decoder layer's weights as row-major float32 matrices in Hugging Face's
// [out_features][in_features] layout. Shapes use H = HiddenSize, I = IntermediateSize,
// Q = QDim, KV = KVDim, D = HeadDim.
//
// The q, k and v projections are stored back to back in QKV (and gate and up in GateUp) so a
// backend can run each group as one matrix product; Q, K, V, Gate and Up are views of those rows.
type Layer struct {
	InputNorm []float32 // [H]
	QKV       []float32 // [Q+2·KV][H]
	Q, K, V   []float32 // views of QKV: [Q][H], [KV][H], [KV][H]
	// QKVBias is nil unless the family has projection biases; QBias, KBias, VBias view it.
	QKVBias             []float32 // [Q+2·KV]
	QBias, KBias, VBias []float32
	// QNorm and KNorm are the per-head RMSNorm weights of Qwen3, nil otherwise.
	QNorm, KNorm []float32 // [D]
	O            []float32 // [H][Q]
	OBias        []float32 // [H], nil unless Config.AttentionBias
	PostAttnNorm []float32 // [H]
	GateUp       []float32 // [2·I][H]
	Gate, Up     []float32 // views of GateUp: [I][H] each
	Down         []float32 // [H][I]
}

// Model is a decoder's configuration and float32 weights.
type Model struct {
	Config     Config
	Generation GenerationConfig
	Embed      []float32 // [V][H]
	Layers     []Layer
	Norm       []float32 // [H]
	// LMHead is [V][H]; it is the same slice as Embed when the embeddings are tied.
	LMHead []float32
}

// tensorSpec names one checkpoint tensor, the shape the config implies, and where it goes.
type tensorSpec struct {
	name  string
	shape []int
	dst   []float32
	// norm marks RMSNorm weights, which random models fill with ones.
	norm bool
}

// allocate builds a Model with zeroed weight buffers for cfg.
func allocate(cfg Config) *Model {
	h, inter, q, kv, d := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	m := &Model{
		Config: cfg,
		Embed:  make([]float32, cfg.VocabSize*h),
		Layers: make([]Layer, cfg.NumLayers),
		Norm:   make([]float32, h),
	}
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	} else {
		m.LMHead = make([]float32, cfg.VocabSize*h)
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.InputNorm = make([]float32, h)
		l.QKV = make([]float32, (q+2*kv)*h)
		l.Q, l.K, l.V = l.QKV[:q*h:q*h], l.QKV[q*h:(q+kv)*h:(q+kv)*h], l.QKV[(q+kv)*h:]
		if cfg.AttentionBias || cfg.QKVBias {
			l.QKVBias = make([]float32, q+2*kv)
			l.QBias, l.KBias, l.VBias = l.QKVBias[:q:q], l.QKVBias[q:q+kv:q+kv], l.QKVBias[q+kv:]
		}
		if cfg.QKNorm {
			l.QNorm, l.KNorm = make([]float32, d), make([]float32, d)
		}
		l.O = make([]float32, h*q)
		if cfg.AttentionBias {
			l.OBias = make([]float32, h)
		}
		l.PostAttnNorm = make([]float32, h)
		l.GateUp = make([]float32, 2*inter*h)
		l.Gate, l.Up = l.GateUp[:inter*h:inter*h], l.GateUp[inter*h:]
		l.Down = make([]float32, h*inter)
	}
	return m
}

// specs lists every tensor the checkpoint must provide for m's config, in checkpoint order.
func (m *Model) specs() []tensorSpec {
	cfg := m.Config
	h, inter, q, kv, d := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	specs := []tensorSpec{{name: "model.embed_tokens.weight", shape: []int{cfg.VocabSize, h}, dst: m.Embed}}
	for i := range m.Layers {
		l := &m.Layers[i]
		p := fmt.Sprintf("model.layers.%d.", i)
		add := func(name string, dst []float32, norm bool, shape ...int) {
			specs = append(specs, tensorSpec{name: p + name, shape: shape, dst: dst, norm: norm})
		}
		add("input_layernorm.weight", l.InputNorm, true, h)
		add("self_attn.q_proj.weight", l.Q, false, q, h)
		add("self_attn.k_proj.weight", l.K, false, kv, h)
		add("self_attn.v_proj.weight", l.V, false, kv, h)
		if l.QKVBias != nil {
			add("self_attn.q_proj.bias", l.QBias, false, q)
			add("self_attn.k_proj.bias", l.KBias, false, kv)
			add("self_attn.v_proj.bias", l.VBias, false, kv)
		}
		if l.QNorm != nil {
			add("self_attn.q_norm.weight", l.QNorm, true, d)
			add("self_attn.k_norm.weight", l.KNorm, true, d)
		}
		add("self_attn.o_proj.weight", l.O, false, h, q)
		if l.OBias != nil {
			add("self_attn.o_proj.bias", l.OBias, false, h)
		}
		add("post_attention_layernorm.weight", l.PostAttnNorm, true, h)
		add("mlp.gate_proj.weight", l.Gate, false, inter, h)
		add("mlp.up_proj.weight", l.Up, false, inter, h)
		add("mlp.down_proj.weight", l.Down, false, h, inter)
	}
	specs = append(specs, tensorSpec{name: "model.norm.weight", shape: []int{h}, dst: m.Norm, norm: true})
	if !cfg.TieWordEmbeddings {
		specs = append(specs, tensorSpec{name: "lm_head.weight", shape: []int{cfg.VocabSize, h}, dst: m.LMHead})
	}
	return specs
}

// Load reads a Hugging Face model directory: config.json, generation_config.json (optional) and
// model.safetensors or the shards listed in model.safetensors.index.json. Every tensor the config
// implies must be present with the implied shape; extra tensors are ignored.
func Load(dir string) (*Model, error) {
	start := time.Now()
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	gen, err := LoadGenerationConfig(dir)
	if err != nil {
		return nil, err
	}
	shards, err := shardFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	m := allocate(cfg)
	m.Generation = gen
	specs := m.specs()
	byName := make(map[string]int, len(specs))
	for i, s := range specs {
		byName[s.name] = i
	}
	loaded := make([]bool, len(specs))
	var totalBytes int64
	for i, shard := range shards {
		n, bytes, err := loadShard(filepath.Join(dir, shard), specs, byName, loaded)
		if err != nil {
			return nil, fmt.Errorf("load model %s: %w", dir, err)
		}
		totalBytes += bytes
		slog.Info("loaded weight shard", "dir", dir, "file", shard, "shard", i+1, "shards", len(shards),
			"tensors", n, "mib", bytes>>20, "elapsed", time.Since(start).Round(time.Millisecond))
	}
	for i, s := range specs {
		if !loaded[i] {
			return nil, fmt.Errorf("load model %s: missing tensor %q (want shape %v)", dir, s.name, s.shape)
		}
	}
	slog.Info("loaded model", "dir", dir, "architecture", cfg.Architecture, "layers", cfg.NumLayers,
		"hidden", cfg.HiddenSize, "vocab", cfg.VocabSize, "mib", totalBytes>>20,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// loadShard converts every wanted tensor of one safetensors file into its destination.
func loadShard(path string, specs []tensorSpec, byName map[string]int, loaded []bool) (int, int64, error) {
	f, err := OpenSafetensors(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var n int
	var bytes int64
	for _, t := range f.Header.Tensors {
		i, ok := byName[t.Name]
		if !ok {
			continue
		}
		s := specs[i]
		if !slices.Equal(t.Shape, s.shape) {
			return 0, 0, fmt.Errorf("%s: tensor %q has shape %v, want %v", path, t.Name, t.Shape, s.shape)
		}
		if loaded[i] {
			return 0, 0, fmt.Errorf("%s: tensor %q appears in more than one shard", path, t.Name)
		}
		if err := f.ReadFloat32(t, s.dst); err != nil {
			return 0, 0, err
		}
		loaded[i] = true
		n++
		bytes += t.End - t.Begin
	}
	return n, bytes, nil
}

// shardFiles lists the safetensors files of dir: the distinct files of the index's weight_map in
// sorted order, or model.safetensors alone.
func shardFiles(dir string) ([]string, error) {
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	data, err := os.ReadFile(indexPath)
	if errors.Is(err, os.ErrNotExist) {
		return []string{"model.safetensors"}, nil
	}
	if err != nil {
		return nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("%s: %w", indexPath, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: empty weight_map", indexPath)
	}
	var files []string
	for name, file := range index.WeightMap {
		if err := safeShardName(file); err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", indexPath, name, err)
		}
		files = append(files, file)
	}
	slices.Sort(files)
	return slices.Compact(files), nil
}

// NewRandom builds a model of shape cfg with deterministic pseudo-random weights drawn from seed:
// projections uniform with variance 1/fan_in (so activations keep their scale through the
// layers), embeddings with unit variance, norm weights near one. It serves benchmarks and tests
// that need a realistic shape without a checkpoint.
func NewRandom(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("random model: %w", err)
	}
	m := allocate(cfg)
	specs := m.specs()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, s := range specs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// One stream per tensor keeps the result independent of goroutine scheduling.
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			fanIn := s.shape[len(s.shape)-1]
			switch {
			case s.norm:
				fillUniform(rng, s.dst, 1, 0.1)
			case len(s.shape) == 1: // bias
				fillUniform(rng, s.dst, 0, 0.1)
			case s.name == "model.embed_tokens.weight":
				fillUniform(rng, s.dst, 0, math.Sqrt(3))
			default:
				fillUniform(rng, s.dst, 0, math.Sqrt(3/float64(fanIn)))
			}
		}()
	}
	wg.Wait()
	return m, nil
}

// fillUniform fills dst with values uniform in [center-halfWidth, center+halfWidth). Each 64-bit
// draw yields two 24-bit uniforms, which is all the resolution a float32 holds.
func fillUniform(rng *rand.Rand, dst []float32, center, halfWidth float64) {
	c, w := float32(center), float32(halfWidth)
	const unit = 1.0 / (1 << 24)
	for i := 0; i < len(dst); i += 2 {
		u := rng.Uint64()
		dst[i] = c + w*(2*float32(u>>40)*unit-1)
		if i+1 < len(dst) {
			dst[i+1] = c + w*(2*float32(u&(1<<24-1))*unit-1)
		}
	}
}

// Qwen3_0_6B is the shape of Qwen/Qwen3-0.6B, for random-weight benchmarks.
func Qwen3_0_6B() Config {
	return Config{
		Architecture: FamilyQwen3, ModelType: "qwen3",
		HiddenSize: 1024, IntermediateSize: 3072, NumLayers: 28, NumHeads: 16, NumKVHeads: 8, HeadDim: 128,
		RMSNormEps: 1e-6, VocabSize: 151936, MaxPositions: 40960, TieWordEmbeddings: true, QKNorm: true,
		Rope: Rope{Theta: 1000000, Type: RopeDefault, Factor: 1}, DType: "bfloat16",
		BOSTokenID: 151643, HasBOS: true, EOSTokenIDs: []int32{151645},
	}
}
