package model

import (
	"encoding/binary"
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
	"unsafe"

	"github.com/llmserve/llmserve/quant"
)

// Layer holds one decoder layer's weights. Projection matrices keep the checkpoint's storage
// type (see Matrix: float32, 16-bit floats, or llama.cpp's block quantizations) in Hugging Face's
// [out_features][in_features] layout; norm weights and biases are float32 vectors. Shapes use
// H = HiddenSize, I = IntermediateSize, Q = QDim, KV = KVDim, D = HeadDim.
//
// The q, k and v projections are stored back to back in QKV (and gate and up in GateUp) so a
// backend can run each group as one matrix product; Q, K, V, Gate and Up are views of those rows,
// or, in a GGUF group whose tensors differ in type, its Parts.
type Layer struct {
	InputNorm []float32 // [H]
	QKV       Matrix    // [Q+2·KV][H]
	Q, K, V   Matrix    // views of QKV: [Q][H], [KV][H], [KV][H]
	// QKVBias is nil unless the family has projection biases; QBias, KBias, VBias view it.
	QKVBias             []float32 // [Q+2·KV]
	QBias, KBias, VBias []float32
	// QNorm and KNorm are the per-head RMSNorm weights of Qwen3, nil otherwise.
	QNorm, KNorm []float32 // [D]
	O            Matrix    // [H][Q]
	OBias        []float32 // [H], nil unless Config.AttentionBias
	PostAttnNorm []float32 // [H]
	GateUp       Matrix    // [2·I][H]
	Gate, Up     Matrix    // views of GateUp: [I][H] each
	Down         Matrix    // [H][I]
}

// Model is a decoder's configuration and weights.
type Model struct {
	Config     Config
	Generation GenerationConfig
	Embed      Matrix // [V][H]
	Layers     []Layer
	Norm       []float32 // [H]
	// LMHead is [V][H]; it is the same matrix (same Data) as Embed when the embeddings are tied.
	LMHead Matrix
	// files are the memory-mapped safetensors files that matrices view; they stay mapped for
	// the life of the process, like the weights themselves.
	files []*File
}

// RowRange returns rows [i, j) of m as a matrix viewing the same bytes.
func RowRange(m Matrix, i, j int) Matrix {
	rb := m.RowBytes()
	return Matrix{Type: m.Type, Rows: j - i, Cols: m.Cols, Data: m.Data[i*rb : j*rb : j*rb]}
}

// tensorSpec names one checkpoint tensor, the shape the config implies, and where it goes: a
// float32 vector (norm weights, biases) or rows [row, row+shape[0]) of a matrix, which may be a
// fused group (QKV, GateUp) shared with other specs.
type tensorSpec struct {
	name  string
	shape []int
	vec   []float32
	mat   *Matrix
	row   int
	// fused marks parts of a multi-tensor matrix, which is allocated and copied rather than
	// viewed in place.
	fused bool
	// norm marks RMSNorm weights, which random models fill with ones.
	norm bool
}

// allocate builds a Model with zeroed norm and bias vectors for cfg; matrices are filled later
// (their storage type depends on the checkpoint).
func allocate(cfg Config) *Model {
	h, q, kv, d := cfg.HiddenSize, cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	m := &Model{
		Config: cfg,
		Layers: make([]Layer, cfg.NumLayers),
		Norm:   make([]float32, h),
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.InputNorm = make([]float32, h)
		if cfg.AttentionBias || cfg.QKVBias {
			l.QKVBias = make([]float32, q+2*kv)
			l.QBias, l.KBias, l.VBias = l.QKVBias[:q:q], l.QKVBias[q:q+kv:q+kv], l.QKVBias[q+kv:]
		}
		if cfg.QKNorm {
			l.QNorm, l.KNorm = make([]float32, d), make([]float32, d)
		}
		if cfg.AttentionBias {
			l.OBias = make([]float32, h)
		}
		l.PostAttnNorm = make([]float32, h)
	}
	return m
}

// specs lists every tensor the checkpoint must provide for m's config, in checkpoint order.
func (m *Model) specs() []tensorSpec {
	cfg := m.Config
	h, inter, q, kv, d := cfg.HiddenSize, cfg.IntermediateSize, cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	m.Embed = Matrix{Rows: cfg.VocabSize, Cols: h}
	specs := []tensorSpec{{name: "model.embed_tokens.weight", shape: []int{cfg.VocabSize, h}, mat: &m.Embed}}
	for i := range m.Layers {
		l := &m.Layers[i]
		l.QKV = Matrix{Rows: q + 2*kv, Cols: h}
		l.O = Matrix{Rows: h, Cols: q}
		l.GateUp = Matrix{Rows: 2 * inter, Cols: h}
		l.Down = Matrix{Rows: h, Cols: inter}
		p := fmt.Sprintf("model.layers.%d.", i)
		vec := func(name string, dst []float32, norm bool, n int) {
			specs = append(specs, tensorSpec{name: p + name, shape: []int{n}, vec: dst, norm: norm})
		}
		mat := func(name string, dst *Matrix, row int, fused bool, rows, cols int) {
			specs = append(specs, tensorSpec{name: p + name, shape: []int{rows, cols}, mat: dst, row: row, fused: fused})
		}
		vec("input_layernorm.weight", l.InputNorm, true, h)
		mat("self_attn.q_proj.weight", &l.QKV, 0, true, q, h)
		mat("self_attn.k_proj.weight", &l.QKV, q, true, kv, h)
		mat("self_attn.v_proj.weight", &l.QKV, q+kv, true, kv, h)
		if l.QKVBias != nil {
			vec("self_attn.q_proj.bias", l.QBias, false, q)
			vec("self_attn.k_proj.bias", l.KBias, false, kv)
			vec("self_attn.v_proj.bias", l.VBias, false, kv)
		}
		if l.QNorm != nil {
			vec("self_attn.q_norm.weight", l.QNorm, true, d)
			vec("self_attn.k_norm.weight", l.KNorm, true, d)
		}
		mat("self_attn.o_proj.weight", &l.O, 0, false, h, q)
		if l.OBias != nil {
			vec("self_attn.o_proj.bias", l.OBias, false, h)
		}
		vec("post_attention_layernorm.weight", l.PostAttnNorm, true, h)
		mat("mlp.gate_proj.weight", &l.GateUp, 0, true, inter, h)
		mat("mlp.up_proj.weight", &l.GateUp, inter, true, inter, h)
		mat("mlp.down_proj.weight", &l.Down, 0, false, h, inter)
	}
	specs = append(specs, tensorSpec{name: "model.norm.weight", shape: []int{h}, vec: m.Norm, norm: true})
	if !cfg.TieWordEmbeddings {
		m.LMHead = Matrix{Rows: cfg.VocabSize, Cols: h}
		specs = append(specs, tensorSpec{name: "lm_head.weight", shape: []int{cfg.VocabSize, h}, mat: &m.LMHead})
	}
	return specs
}

// finishViews sets the row views of the fused matrices and ties the LM head.
func (m *Model) finishViews() {
	cfg := m.Config
	q, kv, inter := cfg.QDim(), cfg.KVDim(), cfg.IntermediateSize
	for i := range m.Layers {
		l := &m.Layers[i]
		if p := l.QKV.Parts; len(p) == 3 {
			l.Q, l.K, l.V = p[0], p[1], p[2]
		} else {
			l.Q, l.K, l.V = RowRange(l.QKV, 0, q), RowRange(l.QKV, q, q+kv), RowRange(l.QKV, q+kv, q+2*kv)
		}
		if p := l.GateUp.Parts; len(p) == 2 {
			l.Gate, l.Up = p[0], p[1]
		} else {
			l.Gate, l.Up = RowRange(l.GateUp, 0, inter), RowRange(l.GateUp, inter, 2*inter)
		}
	}
	if cfg.TieWordEmbeddings {
		m.LMHead = m.Embed
	}
}

// storageType maps a safetensors element type to the matrix type it is kept in: 16-bit floats
// stay 16-bit, F32 stays F32, F64 narrows to F32.
func storageType(dt DType) (quant.Type, error) {
	switch dt {
	case F32, F64:
		return quant.F32, nil
	case BF16:
		return quant.BF16, nil
	case F16:
		return quant.F16, nil
	}
	return 0, fmt.Errorf("dtype %s cannot hold weights (want F32, F16, BF16 or F64)", dt)
}

// found is a checkpoint tensor located for a spec.
type found struct {
	file *File
	info TensorInfo
}

// Load reads a Hugging Face model directory: config.json, generation_config.json (optional) and
// model.safetensors or the shards listed in model.safetensors.index.json. Every tensor the config
// implies must be present with the implied shape; extra tensors are ignored.
//
// Matrices keep the checkpoint's precision: a BF16 or F16 tensor stays 16-bit (a view of the
// memory-mapped file where it is stored alone and aligned, a copy where q/k/v or gate/up are
// fused into one matrix). A fused group whose parts differ in type is widened to float32.
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
	where := make([]*found, len(specs))
	var files []*File
	closeAll := func() {
		for _, f := range files {
			_ = f.Close()
		}
	}
	for _, shard := range shards {
		path := filepath.Join(dir, shard)
		f, err := OpenSafetensors(path)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("load model %s: %w", dir, err)
		}
		files = append(files, f)
		for _, t := range f.Header.Tensors {
			i, ok := byName[t.Name]
			if !ok {
				continue
			}
			s := specs[i]
			if !slices.Equal(t.Shape, s.shape) {
				closeAll()
				return nil, fmt.Errorf("load model %s: %s: tensor %q has shape %v, want %v", dir, path, t.Name, t.Shape, s.shape)
			}
			if where[i] != nil {
				closeAll()
				return nil, fmt.Errorf("load model %s: %s: tensor %q appears in more than one shard", dir, path, t.Name)
			}
			where[i] = &found{file: f, info: t}
		}
	}
	for i, s := range specs {
		if where[i] == nil {
			closeAll()
			return nil, fmt.Errorf("load model %s: missing tensor %q (want shape %v)", dir, s.name, s.shape)
		}
	}
	viewed, totalBytes, err := fillFromFiles(specs, where)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	m.finishViews()
	// Files that matrices view stay mapped; the rest are released now.
	for _, f := range files {
		if viewed[f] {
			m.files = append(m.files, f)
		} else if err := f.Close(); err != nil {
			return nil, fmt.Errorf("load model %s: %w", dir, err)
		}
	}
	slog.Info("loaded model", "dir", dir, "architecture", cfg.Architecture, "layers", cfg.NumLayers,
		"hidden", cfg.HiddenSize, "vocab", cfg.VocabSize, "weights", m.Layers[0].QKV.Type, "mib", totalBytes>>20,
		"shards", len(shards), "elapsed", time.Since(start).Round(time.Millisecond))
	return m, nil
}

// fillFromFiles fills every spec's destination from its located tensor. It returns the files
// that some matrix views in place.
func fillFromFiles(specs []tensorSpec, where []*found) (map[*File]bool, int64, error) {
	// Each matrix takes the storage type its parts agree on, float32 where they disagree.
	types := map[*Matrix]quant.Type{}
	for i, s := range specs {
		if s.mat == nil {
			continue
		}
		t, err := storageType(where[i].info.DType)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: tensor %q: %w", where[i].file.Path, s.name, err)
		}
		if prev, ok := types[s.mat]; ok && prev != t {
			t = quant.F32
		}
		types[s.mat] = t
	}
	viewed := map[*File]bool{}
	var total int64
	for i, s := range specs {
		w := where[i]
		raw := w.file.data[w.file.Header.DataStart+w.info.Begin : w.file.Header.DataStart+w.info.End]
		total += int64(len(raw))
		if s.vec != nil {
			if err := DecodeFloat32(s.vec, w.info.DType, raw); err != nil {
				return nil, 0, fmt.Errorf("%s: tensor %q: %w", w.file.Path, s.name, err)
			}
			continue
		}
		t := types[s.mat]
		s.mat.Type = t
		rb, err := t.RowBytes(s.mat.Cols)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: tensor %q: %w", w.file.Path, s.name, err)
		}
		same := (t == quant.BF16 && w.info.DType == BF16) || (t == quant.F16 && w.info.DType == F16) ||
			(t == quant.F32 && w.info.DType == F32)
		align := uintptr(2)
		if t == quant.F32 {
			align = 4
		}
		if !s.fused && same && len(raw) > 0 && uintptr(unsafe.Pointer(&raw[0]))%align == 0 {
			s.mat.Data = raw[:len(raw):len(raw)]
			viewed[w.file] = true
			continue
		}
		if s.mat.Data == nil {
			s.mat.Data = make([]byte, s.mat.Rows*rb)
		}
		dst := s.mat.Data[s.row*rb : (s.row+s.shape[0])*rb]
		if same {
			copy(dst, raw)
			continue
		}
		// Widen (or narrow F64) to float32.
		if err := DecodeFloat32(bytesAsFloat32(dst), w.info.DType, raw); err != nil {
			return nil, 0, fmt.Errorf("%s: tensor %q: %w", w.file.Path, s.name, err)
		}
	}
	return viewed, total, nil
}

// bytesAsFloat32 views b (4-byte aligned, as make returns it) as float32s.
func bytesAsFloat32(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
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
// layers), embeddings with unit variance, norm weights near one. Matrices are stored as BF16 when
// cfg.DType is "bfloat16", F16 for "float16", F32 otherwise (values drawn in float32, then
// rounded). It serves benchmarks and tests that need a realistic shape without a checkpoint.
func NewRandom(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("random model: %w", err)
	}
	t := quant.F32
	switch cfg.DType {
	case "bfloat16":
		t = quant.BF16
	case "float16":
		t = quant.F16
	}
	m := allocate(cfg)
	specs := m.specs()
	for _, s := range specs {
		if s.mat != nil && s.mat.Data == nil {
			rb, err := t.RowBytes(s.mat.Cols)
			if err != nil {
				return nil, fmt.Errorf("random model: %w", err)
			}
			s.mat.Type = t
			s.mat.Data = make([]byte, s.mat.Rows*rb)
		}
	}
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
			dst := s.vec
			if s.mat != nil {
				dst = make([]float32, s.shape[0]*s.shape[1])
			}
			switch {
			case s.norm:
				fillUniform(rng, dst, 1, 0.1)
			case len(s.shape) == 1: // bias
				fillUniform(rng, dst, 0, 0.1)
			case s.name == "model.embed_tokens.weight":
				fillUniform(rng, dst, 0, math.Sqrt(3))
			default:
				fillUniform(rng, dst, 0, math.Sqrt(3/float64(fanIn)))
			}
			if s.mat != nil {
				encodeRows(*s.mat, s.row, dst)
			}
		}()
	}
	wg.Wait()
	m.finishViews()
	return m, nil
}

// encodeRows stores float32 values src into m's rows from row on, rounding to m's float type.
func encodeRows(m Matrix, row int, src []float32) {
	off := row * m.Cols
	switch m.Type {
	case quant.F32:
		copy(bytesAsFloat32(m.Data)[off:], src)
	case quant.BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(m.Data[2*(off+i):], Float32ToBF16(v))
		}
	case quant.F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(m.Data[2*(off+i):], Float32ToHalf(v))
		}
	default:
		panic(fmt.Sprintf("encodeRows: %s is not a float type", m.Type))
	}
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

// RowFloat32 widens row i of a float matrix (F32, F16, BF16) into dst (m.Cols elements).
func RowFloat32(m Matrix, i int, dst []float32) error {
	if len(dst) != m.Cols || i < 0 || i >= m.Rows {
		return fmt.Errorf("row %d of a %dx%d matrix into %d floats", i, m.Rows, m.Cols, len(dst))
	}
	raw := m.Row(i)
	switch m.Type {
	case quant.F32:
		copy(dst, bytesAsFloat32(raw))
	case quant.BF16:
		for j := range dst {
			dst[j] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*j:])) << 16)
		}
	case quant.F16:
		for j := range dst {
			dst[j] = HalfToFloat32(binary.LittleEndian.Uint16(raw[2*j:]))
		}
	default:
		return fmt.Errorf("row of a %s matrix: not a float type", m.Type)
	}
	return nil
}
