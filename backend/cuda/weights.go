package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// matrix is a projection on the device, [out][in]: bf16; Q8_0 or Q4_K blocks as llama.cpp
// lays them out (q set); or f32 (f32 set) for checkpoints stored in any other type (widened
// exactly; other block quantizations, and matrices mixing types, dequantized).
type matrix struct {
	// p is the device copy of the rows.
	p dev.Ptr
	// f32 marks rows widened to float32.
	f32 bool
	// q is the block quantization the rows are stored in (quant.Q8_0 or quant.Q4_K), 0 for
	// float rows.
	q quant.Type
}

// layerWeights are one decoder layer's device tensors: projections as matrix, norms and biases
// in f32 (0 when the family has none).
type layerWeights struct {
	qkv, o, gateUp, down           matrix
	inNorm, postNorm, qNorm, kNorm dev.Ptr
	qkvBias, oBias                 dev.Ptr
}

// weights are the model's device tensors.
type weights struct {
	embed, lmHead matrix
	norm          dev.Ptr
	layers        []layerWeights
	// bytes is the device memory they occupy.
	bytes int64
}

// uploader allocates device tensors and fills them, remembering every allocation for Close.
type uploader struct {
	d      dev.Device
	allocs *[]dev.Ptr
	bytes  int64
}

func (u *uploader) put(data []byte) (dev.Ptr, error) {
	p, err := u.d.Alloc(int64(len(data)))
	if err != nil {
		return 0, err
	}
	*u.allocs = append(*u.allocs, p)
	u.bytes += int64(len(data))
	if err := u.d.Upload(p, data); err != nil {
		return 0, err
	}
	return p, nil
}

// f32 uploads a float32 vector (nil: no tensor, pointer 0).
func (u *uploader) f32(x []float32) (dev.Ptr, error) {
	if x == nil {
		return 0, nil
	}
	return u.put(f32Bytes(x))
}

// matrix uploads a matrix in its stored precision: BF16, Q8_0 and Q4_K as stored; any other
// type (F32, F16, Q4_0, Q6_K, or a mix of types) widened to f32 exactly, for the f32-weight GEMM.
func (u *uploader) matrix(m model.Matrix) (matrix, error) {
	bf16 := true
	for _, blk := range m.Blocks() {
		bf16 = bf16 && blk.Type == quant.BF16
	}
	// Q8_0 and Q4_K have kernels of their own (gemv_q8_0, gemv_q4_k, gemm_q, embed_q): their
	// blocks go up as stored.
	if t := m.Blocks()[0].Type; t == quant.Q8_0 || t == quant.Q4_K {
		same := true
		for _, blk := range m.Blocks() {
			same = same && blk.Type == t
		}
		if same {
			out := make([]byte, 0, m.Bytes())
			for _, blk := range m.Blocks() {
				out = append(out, blk.Data...)
			}
			p, err := u.put(out)
			return matrix{p: p, q: t}, err
		}
	}
	if bf16 {
		out := make([]byte, 0, 2*m.Rows*m.Cols)
		for _, blk := range m.Blocks() {
			out = append(out, blk.Data[:2*blk.Rows*blk.Cols]...)
		}
		p, err := u.put(out)
		return matrix{p: p}, err
	}
	out := make([]byte, 0, 4*m.Rows*m.Cols)
	for _, blk := range m.Blocks() {
		row := make([]float32, blk.Cols)
		for r := range blk.Rows {
			var err error
			if blk.Type.Quantized() {
				err = quant.Dequantize(blk.Type, blk.Row(r), row)
			} else {
				err = model.RowFloat32(blk, r, row)
			}
			if err != nil {
				return matrix{}, fmt.Errorf("row %d: %w", r, err)
			}
			for _, v := range row {
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
			}
		}
	}
	p, err := u.put(out)
	return matrix{p: p, f32: true}, err
}

// uploadWeights copies m's weights to the device.
func uploadWeights(d dev.Device, m *model.Model, allocs *[]dev.Ptr) (*weights, error) {
	u := &uploader{d: d, allocs: allocs}
	w := &weights{layers: make([]layerWeights, len(m.Layers))}
	var err error
	try := func(name string, p *dev.Ptr, f func() (dev.Ptr, error)) {
		if err != nil {
			return
		}
		if *p, err = f(); err != nil {
			err = fmt.Errorf("upload %s: %w", name, err)
		}
	}
	mat := func(name string, p *matrix, src model.Matrix) {
		if err != nil {
			return
		}
		if *p, err = u.matrix(src); err != nil {
			err = fmt.Errorf("upload %s: %w", name, err)
		}
	}
	mat("embed_tokens", &w.embed, m.Embed)
	if len(m.LMHead.Data) > 0 && len(m.Embed.Data) > 0 && &m.LMHead.Data[0] == &m.Embed.Data[0] && m.LMHead.Type == m.Embed.Type {
		w.lmHead = w.embed // tied embeddings: one copy
	} else {
		mat("lm_head", &w.lmHead, m.LMHead)
	}
	try("norm", &w.norm, func() (dev.Ptr, error) { return u.f32(m.Norm) })
	for i := range m.Layers {
		l, lw := &m.Layers[i], &w.layers[i]
		name := func(s string) string { return fmt.Sprintf("layer %d %s", i, s) }
		mat(name("qkv"), &lw.qkv, l.QKV)
		mat(name("o_proj"), &lw.o, l.O)
		mat(name("gate_up"), &lw.gateUp, l.GateUp)
		mat(name("down_proj"), &lw.down, l.Down)
		try(name("input_layernorm"), &lw.inNorm, func() (dev.Ptr, error) { return u.f32(l.InputNorm) })
		try(name("post_attention_layernorm"), &lw.postNorm, func() (dev.Ptr, error) { return u.f32(l.PostAttnNorm) })
		try(name("q_norm"), &lw.qNorm, func() (dev.Ptr, error) { return u.f32(l.QNorm) })
		try(name("k_norm"), &lw.kNorm, func() (dev.Ptr, error) { return u.f32(l.KNorm) })
		try(name("qkv bias"), &lw.qkvBias, func() (dev.Ptr, error) { return u.f32(l.QKVBias) })
		try(name("o_proj bias"), &lw.oBias, func() (dev.Ptr, error) { return u.f32(l.OBias) })
	}
	w.bytes = u.bytes
	return w, err
}

// toBF16 rounds to the nearest bfloat16, ties to even (NaN stays NaN).
func toBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// f32Bytes views float32s as little-endian bytes (a copy).
func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))...)
}

// i32Bytes views int32s as little-endian bytes (a copy).
func i32Bytes(x []int32) []byte {
	if len(x) == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))...)
}

// ropeTables returns cos and sin of every (position, frequency) pair for positions [0, n), from
// the inverse frequencies model.Config.RopeInvFreq derives (as transformers does), each angle
// rounded to float32 before its cosine and sine are taken in float64, as the CPU backend does.
func ropeTables(cfg model.Config, n int) (cos, sin []float32) {
	inv := cfg.RopeInvFreq()
	half := len(inv)
	cos, sin = make([]float32, n*half), make([]float32, n*half)
	for p := range n {
		for i, f := range inv {
			angle := float64(f * float32(p))
			cos[p*half+i] = float32(math.Cos(angle))
			sin[p*half+i] = float32(math.Sin(angle))
		}
	}
	return cos, sin
}

// fillWeights makes random weights of shape cfg on the device (fill_bf16, uniform with variance
// about 1/fan_in; norms one), for benchmarks of shapes no checkpoint is at hand for: nothing of
// their size crosses from the host. Biases and q/k norms follow cfg. With qt Q8_0 or Q4_K the
// matrices are that type's blocks filled with random bf16 bit patterns of magnitude below 0.01:
// every f16 scale they hold is then finite (below 2), and the kernels' time does not depend on
// the values.
func fillWeights(d dev.Device, cfg model.Config, qt quant.Type, allocs *[]dev.Ptr) (*weights, error) {
	u := &uploader{d: d, allocs: allocs}
	seed := uint32(1)
	mat := func(rows, cols int) (matrix, error) {
		rb := 2 * cols
		if qt == quant.Q8_0 || qt == quant.Q4_K {
			var err error
			if rb, err = qt.RowBytes(cols); err != nil {
				return matrix{}, err
			}
		}
		n := rows * rb / 2 // bf16 elements to fill
		p, err := d.Alloc(int64(2 * n))
		if err != nil {
			return matrix{}, err
		}
		*allocs = append(*allocs, p)
		u.bytes += int64(2 * n)
		seed++
		scale := float32(math.Sqrt(3 / float64(cols)))
		m := matrix{p: p}
		if qt == quant.Q8_0 || qt == quant.Q4_K {
			scale, m.q = 0.01, qt
		}
		a := dev.FillArgs{Out: p, N: uint64(n), Seed: seed, Scale: scale}
		return m, d.Launch(dev.KFillBF16, dev.D1((n+1023)/1024), dev.D1(256), 0, dev.Pack(&a))
	}
	ones := func(n int) (dev.Ptr, error) {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		return u.f32(x)
	}
	h, qkv, inter := cfg.HiddenSize, cfg.QDim()+2*cfg.KVDim(), cfg.IntermediateSize
	w := &weights{layers: make([]layerWeights, cfg.NumLayers)}
	var err error
	set := func(p *dev.Ptr, f func() (dev.Ptr, error)) {
		if err == nil {
			*p, err = f()
		}
	}
	setM := func(p *matrix, rows, cols int) {
		if err == nil {
			*p, err = mat(rows, cols)
		}
	}
	setM(&w.embed, cfg.VocabSize, h)
	if cfg.TieWordEmbeddings {
		w.lmHead = w.embed
	} else {
		setM(&w.lmHead, cfg.VocabSize, h)
	}
	set(&w.norm, func() (dev.Ptr, error) { return ones(h) })
	for i := range w.layers {
		l := &w.layers[i]
		setM(&l.qkv, qkv, h)
		setM(&l.o, h, cfg.QDim())
		setM(&l.gateUp, 2*inter, h)
		setM(&l.down, h, inter)
		set(&l.inNorm, func() (dev.Ptr, error) { return ones(h) })
		set(&l.postNorm, func() (dev.Ptr, error) { return ones(h) })
		if cfg.QKNorm {
			set(&l.qNorm, func() (dev.Ptr, error) { return ones(cfg.HeadDim) })
			set(&l.kNorm, func() (dev.Ptr, error) { return ones(cfg.HeadDim) })
		}
	}
	w.bytes = u.bytes
	return w, err
}
