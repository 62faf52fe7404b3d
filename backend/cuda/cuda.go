package cuda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"unsafe"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/cu"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/backend/cuda/internal/emu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
)

// DefaultBlockSize is the number of positions per KV block when Options.BlockSize is 0 (the CPU
// backend's, so pools are diffable).
const DefaultBlockSize = 16

// workspaceReserve is device memory kept free for step buffers when the KV pool is sized from
// the memory left after the weights.
const workspaceReserve = 1 << 30

// Largest head dimension and GQA group the attention kernels handle.
const (
	maxHeadDim = 256
	maxGroup   = 8
)

// Tuning holds the CUDA backend's own settings (backend.Options.Tuning).
type Tuning struct {
	// NoGraphs runs decode steps eagerly instead of replaying CUDA graphs.
	NoGraphs bool
	// Emulate runs on the Go emulator (package internal/emu) instead of a GPU: every kernel is
	// its Go reference, for tests and for running the backend where there is no GPU.
	Emulate bool
	// EmulatedMemory is the emulated device's memory in bytes (8 GiB when 0).
	EmulatedMemory int64
	// MaxPositions bounds a sequence's context (the model's max_position_embeddings when 0):
	// it sizes the RoPE table, the block-table stride and the split-KV workspace.
	MaxPositions int
	// NoCublasLt runs the prompt rows' GEMMs on the built-in tiled kernel even where cuBLASLt
	// loads (comparisons, and a fallback should a cuBLASLt release misbehave).
	NoCublasLt bool
	// LtDecodeRows, when positive, sends the decode rows of a GEMM through cuBLASLt too once a
	// step has at least that many of them (the built-in decode kernel reads each weight row
	// once per dev.GemvRows rows; cuBLASLt's tiles reuse it more at large batches). It gives up
	// batch invariance: a decode row's result then depends on the step's decode row count.
	// 0, the default, keeps every decode row on the built-in kernel; BenchmarkLtGemm measures
	// where the two cross (BatchDependentDecodeRows, what schedulerd --batch-dependent sets).
	LtDecodeRows int
}

// BatchDependentDecodeRows is the LtDecodeRows schedulerd's --batch-dependent sets: on an H200
// (BenchmarkLtGemm, 2026-11-26) the built-in decode GEMM and cuBLASLt's pinned plan break even
// at about 4 rows of an 8B model's gate|up projection (0.140 vs 0.142 ms) and 8-16 rows of a
// 0.6B model's (0.031 vs 0.024-0.027 ms at 16); at 16-64 rows of the 8B shapes cuBLASLt is
// 2.2-16x faster.
const BatchDependentDecodeRows = 8

// EmulateEnv, set to 1, runs a backend opened without a Tuning (schedulerd --device cuda) on
// the emulator: the whole engine then runs the CUDA backend's host side on a machine without a
// GPU, slowly (every kernel is Go reference code).
const EmulateEnv = "LLMSERVE_CUDA_EMULATE"

func tuning(opts *backend.Options) (Tuning, error) {
	switch t := opts.Tuning.(type) {
	case nil:
		return Tuning{Emulate: os.Getenv(EmulateEnv) == "1"}, nil
	case Tuning:
		return t, nil
	case *Tuning:
		if t == nil {
			return Tuning{}, nil
		}
		return *t, nil
	}
	return Tuning{}, fmt.Errorf("tuning of type %T is not the CUDA backend's (cuda.Tuning)", opts.Tuning)
}

func init() {
	// backend.Open names the device in its errors, so the registered constructor does not.
	backend.Register("cuda", func(m *model.Model, opts backend.Options) (backend.Backend, error) { return open(m, opts) })
}

// Backend runs a model on one CUDA device (or the emulator). Forward and ForwardSample must
// not be called concurrently.
type Backend struct {
	d    dev.Device
	cfg  model.Config
	tune Tuning
	// numBlocks is the pool size the scheduler sees; block numBlocks is the dummy block that
	// padding rows write to.
	numBlocks, bs int
	// stride is the block-table row length (blocks a sequence may hold), maxPos the positions.
	stride, maxPos int
	// kvF32 is set for an f32 KV cache (else bf16).
	kvF32 bool

	w      *weights
	kcache []dev.Ptr
	vcache []dev.Ptr
	// ropeCos and ropeSin are [maxPos][HeadDim/2].
	ropeCos, ropeSin dev.Ptr
	// allocs lists every allocation of weights and pool, freed by Close.
	allocs []dev.Ptr

	buf stepBuffers
	// graphs holds the captured decode graph of each bucket; they bake in buf's pointers and
	// capacities, so growing buf drops them.
	graphs map[int]dev.Graph
	// kvPlan is how the KV pool was sized.
	kvPlan backend.KVPlan
	// logits is the host copy of the last step's logits rows.
	logits []float32
	// samp is the sampling state (sample.go).
	samp sampleBuffers
	// lt holds the weight shapes whose prompt rows run on the library GEMM (cuBLASLt), each
	// prepared (its algorithm chosen) at open; nil when there is none (see initLt). ltName
	// names the library for logs.
	lt     map[ltShape]bool
	ltName string

	closed bool
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.DeviceSampler = (*Backend)(nil)
)

// New opens device opts.Device (or the emulator, with Tuning.Emulate), uploads m's weights in
// bf16 and allocates the KV pool.
func New(m *model.Model, opts backend.Options) (*Backend, error) {
	b, err := open(m, opts)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	return b, nil
}

func open(m *model.Model, opts backend.Options) (*Backend, error) {
	t, err := tuning(&opts)
	if err != nil {
		return nil, err
	}
	var d dev.Device
	if t.Emulate {
		mem := t.EmulatedMemory
		if mem == 0 {
			mem = 8 << 30
		}
		d = emu.New(mem)
	} else {
		if d, err = openDriver(opts.Device); err != nil {
			if cu.Load() != nil {
				// the loader's text alone does not say what to do instead
				return nil, fmt.Errorf("%w (no NVIDIA driver here: --device cpu runs on the CPU, %s=1 on the emulated device)", err, EmulateEnv)
			}
			return nil, err
		}
	}
	b, err := newBackend(d, m, opts, t)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return b, nil
}

func newBackend(d dev.Device, m *model.Model, opts backend.Options, t Tuning) (*Backend, error) {
	if m == nil {
		return nil, errors.New("nil model")
	}
	return newBackendWith(d, m.Config, opts, t, func(allocs *[]dev.Ptr) (*weights, error) { return uploadWeights(d, m, allocs) })
}

// newBackendWith builds the backend for a model of shape cfg whose weights mkWeights puts on the
// device (uploaded from a checkpoint, or made there for benchmarks).
func newBackendWith(d dev.Device, cfg model.Config, opts backend.Options, t Tuning, mkWeights func(allocs *[]dev.Ptr) (*weights, error)) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if cfg.HeadDim > maxHeadDim || cfg.NumHeads%cfg.NumKVHeads != 0 || cfg.NumHeads/cfg.NumKVHeads > maxGroup {
		return nil, fmt.Errorf("head dim %d, %d heads over %d KV heads: the attention kernels take head dim <= %d and groups <= %d",
			cfg.HeadDim, cfg.NumHeads, cfg.NumKVHeads, maxHeadDim, maxGroup)
	}
	if opts.KVCacheDType == backend.KVF16 {
		return nil, fmt.Errorf("KV cache dtype %s: the CUDA backend stores bf16 or f32", opts.KVCacheDType)
	}
	bs := opts.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	maxPos := t.MaxPositions
	if maxPos == 0 {
		maxPos = cfg.MaxPositions
	}
	if maxPos <= 0 {
		return nil, fmt.Errorf("model has no max_position_embeddings; set Tuning.MaxPositions")
	}
	b := &Backend{d: d, cfg: cfg, tune: t, bs: bs, maxPos: maxPos, stride: (maxPos + bs - 1) / bs, graphs: map[int]dev.Graph{}}
	var err error
	if b.w, err = mkWeights(&b.allocs); err != nil {
		b.free()
		return nil, err
	}
	cos, sin := ropeTables(cfg, maxPos)
	u := &uploader{d: d, allocs: &b.allocs}
	if b.ropeCos, err = u.f32(cos); err == nil {
		b.ropeSin, err = u.f32(sin)
	}
	if err != nil {
		b.free()
		return nil, fmt.Errorf("upload RoPE table: %w", err)
	}
	// the KV cache follows the weights unless set: f32 for checkpoints uploaded in f32
	switch opts.KVCacheDType {
	case backend.KVF32:
		b.kvF32 = true
	case backend.KVAuto:
		b.kvF32 = len(b.w.layers) > 0 && b.w.layers[0].qkv.f32
	}
	elem := int64(2)
	if b.kvF32 {
		elem = 4
	}
	perBlock := int64(cfg.NumKVHeads*bs*cfg.HeadDim) * elem // bytes of K (or V) per block per layer
	plan, err := opts.KVBlocks(2*int64(cfg.NumLayers)*perBlock, func() (int64, error) {
		free, _, err := d.MemInfo()
		return max(0, free-workspaceReserve), err
	})
	if err != nil {
		b.free()
		return nil, err
	}
	b.numBlocks, b.kvPlan = plan.Blocks, plan
	b.initLt()
	layerBytes := int64(plan.Blocks+1) * perBlock // +1: the dummy block
	for range cfg.NumLayers {
		for _, c := range []*[]dev.Ptr{&b.kcache, &b.vcache} {
			p, err := d.Alloc(layerBytes)
			if err != nil {
				b.free()
				return nil, fmt.Errorf("KV pool of %d blocks: %w", plan.Blocks, err)
			}
			b.allocs = append(b.allocs, p)
			// zeroed, so a padding row's reads of the dummy block are finite
			if err := d.Memset(p, 0, layerBytes); err != nil {
				b.free()
				return nil, err
			}
			*c = append(*c, p)
		}
	}
	slog.Info("cuda backend ready", "device", d.Name(), "weights_bytes", b.w.bytes, "kv_blocks", plan.Blocks,
		"kv_bytes", plan.Bytes, "kv_f32", b.kvF32, "kv_sized_by", plan.Source, "block_size", bs, "max_positions", maxPos, "graphs", !t.NoGraphs,
		"prompt_gemm", b.gemmName())
	return b, nil
}

// free releases every allocation.
func (b *Backend) free() {
	for _, p := range b.allocs {
		_ = b.d.Free(p)
	}
	b.allocs = nil
	b.buf.free(b.d)
	b.samp.free(b.d)
}

// KVPlan says how the KV pool was sized (schedulerd logs it).
func (b *Backend) KVPlan() backend.KVPlan { return b.kvPlan }

// LogAttrs describes the device and the weights for schedulerd's start-up log.
func (b *Backend) LogAttrs() []any {
	return []any{"cuda_device", b.d.Name(), "weights_bytes", b.w.bytes, "graphs", !b.tune.NoGraphs, "prompt_gemm", b.gemmName()}
}

// NumBlocks is the number of KV blocks the scheduler may use.
func (b *Backend) NumBlocks() int { return b.numBlocks }

// BlockSize is the number of positions per block.
func (b *Backend) BlockSize() int { return b.bs }

// VocabSize is the length of a logits row.
func (b *Backend) VocabSize() int { return b.cfg.VocabSize }

// Close frees the device memory and the device.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.free()
	b.graphs = nil
	return b.d.Close()
}

// stepBuffers are the device buffers of one step, at capacities that only grow.
type stepBuffers struct {
	// rows, seqs, logits and parts are the capacities: token rows, block-table rows, logits
	// rows and split-KV partitions per row.
	rows, seqs, logitCap, parts int
	x, xn, qkv, attn, gu        dev.Ptr
	ids, pos, rowSeq, tables    dev.Ptr
	decode, tiles, logitRows    dev.Ptr
	partO, partM, partL         dev.Ptr
	sel, logits                 dev.Ptr
	// xb is the bf16 copy of a library GEMM's activations (rows x the largest K).
	xb  dev.Ptr
	all []dev.Ptr
}

func (s *stepBuffers) free(d dev.Device) {
	for _, p := range s.all {
		_ = d.Free(p)
	}
	*s = stepBuffers{}
}

// ensure grows the step buffers to hold p (at least the largest graph bucket's decode), and
// drops the captured graphs when it does.
func (b *Backend) ensure(p *plan) error {
	s := &b.buf
	if p.rows <= s.rows && p.seqs <= s.seqs && len(p.logitRows) <= s.logitCap && p.maxParts <= s.parts {
		return nil
	}
	rows := max(p.rows, 2*s.rows, 64)
	seqs := max(p.seqs, 2*s.seqs, 64)
	logitCap := max(len(p.logitRows), 2*s.logitCap, 64)
	parts := max(p.maxParts, s.parts, 1)
	if !b.tune.NoGraphs {
		rows, seqs, logitCap = max(rows, maxGraphBatch), max(seqs, maxGraphBatch+1), max(logitCap, maxGraphBatch)
	}
	s.free(b.d)
	b.graphs = map[int]dev.Graph{}
	cfg := b.cfg
	h, qDim, qkvDim := cfg.HiddenSize, cfg.QDim(), cfg.QDim()+2*cfg.KVDim()
	var err error
	alloc := func(p *dev.Ptr, n int) {
		if err != nil {
			return
		}
		if *p, err = b.d.Alloc(int64(max(n, 1))); err == nil {
			s.all = append(s.all, *p)
		}
	}
	alloc(&s.x, 4*rows*h)
	alloc(&s.xn, 4*rows*h)
	alloc(&s.qkv, 4*rows*qkvDim)
	alloc(&s.attn, 4*rows*qDim)
	alloc(&s.gu, 4*rows*2*cfg.IntermediateSize)
	alloc(&s.ids, 4*rows)
	alloc(&s.pos, 4*rows)
	alloc(&s.rowSeq, 4*rows)
	alloc(&s.tables, 4*seqs*b.stride)
	alloc(&s.decode, 4*rows)
	alloc(&s.tiles, 8*rows)
	alloc(&s.logitRows, 4*logitCap)
	alloc(&s.partO, 4*rows*cfg.NumHeads*parts*cfg.HeadDim)
	alloc(&s.partM, 4*rows*cfg.NumHeads*parts)
	alloc(&s.partL, 4*rows*cfg.NumHeads*parts)
	alloc(&s.sel, 4*logitCap*h)
	alloc(&s.logits, 4*logitCap*cfg.VocabSize)
	if b.lt != nil {
		alloc(&s.xb, 2*max(rows, logitCap)*max(h, qDim, cfg.IntermediateSize))
	}
	if err != nil {
		s.free(b.d)
		return fmt.Errorf("step buffers for %d rows: %w", rows, err)
	}
	s.rows, s.seqs, s.logitCap, s.parts = rows, seqs, logitCap, parts
	return nil
}

// upload copies the plan's inputs into the step buffers.
func (b *Backend) upload(p *plan) error {
	s := &b.buf
	for _, c := range []struct {
		dst dev.Ptr
		src []int32
	}{{s.ids, p.ids}, {s.pos, p.pos}, {s.rowSeq, p.rowSeq}, {s.tables, p.tables}, {s.decode, p.decodeRows}, {s.tiles, p.tiles}, {s.logitRows, p.logitRows}} {
		if len(c.src) == 0 {
			continue
		}
		if err := b.d.Upload(c.dst, i32Bytes(c.src)); err != nil {
			return err
		}
	}
	return nil
}

// launch packs args and enqueues kernel k.
func launch[T any](d dev.Device, k dev.Kernel, grid, block dev.Dim3, args *T) error {
	if err := d.Launch(k, grid, block, 0, dev.Pack(args)); err != nil {
		return fmt.Errorf("%s: %w", k, err)
	}
	return nil
}

// flag is 1 for true, as kernels take booleans.
func flag(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// gemm enqueues out (+)= x · wᵀ over m rows, the first nd of them decode rows: those run the
// decode GEMM of w's type (one weight read shared by up to dev.GemvRows rows, many CTAs over
// n), the rest cuBLASLt where it takes w (lt.go) or else the tiled GEMM, so each row's
// arithmetic depends only on its kind, never on the batch. f32 weights (and shapes the decode
// kernels cannot take) run every row on the prompt path.
func (b *Backend) gemm(out, x dev.Ptr, w matrix, m, n, k, ldx, ldo int, acc bool, nd int) error {
	lt := b.ltTakes(w, n, k, ldo)
	if lt && b.tune.LtDecodeRows > 0 && nd >= b.tune.LtDecodeRows {
		nd = 0 // every row on the library GEMM (Tuning.LtDecodeRows)
	}
	if nd > 0 {
		if kern, ok := gemvKernel(w, k, ldx); ok {
			a := dev.GemvArgs{Out: out, X: x, W: w.p, M: int32(nd), N: int32(n), K: int32(k), Ldx: int32(ldx), Ldo: int32(ldo), Accumulate: flag(acc)}
			if err := launch(b.d, kern, dev.GemvGrid(nd, n), dev.D1(32*dev.GemvWarps), &a); err != nil {
				return err
			}
			x += dev.Ptr(4 * nd * ldx)
			out += dev.Ptr(4 * nd * ldo)
			m -= nd
		}
	}
	if m == 0 {
		return nil
	}
	if lt {
		return b.ltGemm(out, x, w, m, n, k, ldx, ldo, acc)
	}
	grid := dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}
	if w.q != 0 {
		a := dev.GemmQArgs{Out: out, X: x, W: w.p, M: int32(m), N: int32(n), K: int32(k), Ldx: int32(ldx), Ldo: int32(ldo),
			Accumulate: flag(acc), QType: int32(w.q)}
		return launch(b.d, dev.KGemmQ, grid, dev.D1(256), &a)
	}
	a := dev.GemmArgs{Out: out, X: x, W: w.p, M: int32(m), N: int32(n), K: int32(k), Ldx: int32(ldx), Ldo: int32(ldo),
		Accumulate: flag(acc), WF32: flag(w.f32)}
	return launch(b.d, dev.KGemm, grid, dev.D1(256), &a)
}

// gemvKernel is the decode GEMM for w with k inputs read at stride ldx, if one takes it.
func gemvKernel(w matrix, k, ldx int) (dev.Kernel, bool) {
	if ldx%4 != 0 {
		return 0, false // 16-byte activation loads
	}
	switch {
	case w.q == quant.Q8_0:
		return dev.KGemvQ8_0, true
	case w.q == quant.Q4_K:
		return dev.KGemvQ4_K, true
	case w.f32:
		return 0, false
	default:
		return dev.KGemv, k%8 == 0
	}
}

// enqueue issues every launch of the forward pass of p, with parts split-KV partitions per
// decode row (a graph's capacity, or the step's need), ending with the logits rows.
func (b *Backend) enqueue(p *plan, parts int) error {
	cfg, s, d := b.cfg, &b.buf, b.d
	rows, nd := p.rows, p.decodeLead
	h, qDim, inter, hd := cfg.HiddenSize, cfg.QDim(), cfg.IntermediateSize, cfg.HeadDim
	nh, nkv := cfg.NumHeads, cfg.NumKVHeads
	qkvDim := qDim + 2*cfg.KVDim()
	eps := float32(cfg.RMSNormEps)
	scale := float32(1 / math.Sqrt(float64(hd)))
	blk := dev.D1(256)
	if b.w.embed.q != 0 {
		if err := launch(d, dev.KEmbedQ, dev.D1(rows), blk, &dev.EmbedQArgs{Out: s.x, Table: b.w.embed.p, IDs: s.ids, Rows: int32(rows), H: int32(h), QType: int32(b.w.embed.q)}); err != nil {
			return err
		}
	} else if err := launch(d, dev.KEmbed, dev.D1(rows), blk, &dev.EmbedArgs{Out: s.x, Table: b.w.embed.p, IDs: s.ids, Rows: int32(rows), H: int32(h), TableF32: flag(b.w.embed.f32)}); err != nil {
		return err
	}
	for l := range cfg.NumLayers {
		w := &b.w.layers[l]
		steps := []func() error{
			func() error {
				return launch(d, dev.KRMSNorm, dev.D1(rows), blk, &dev.RMSNormArgs{Out: s.xn, X: s.x, W: w.inNorm, Rows: int32(rows), H: int32(h), Eps: eps})
			},
			func() error { return b.gemm(s.qkv, s.xn, w.qkv, rows, qkvDim, h, h, qkvDim, false, nd) },
			func() error {
				return launch(d, dev.KQKVPost, dev.Dim3{uint32(rows), uint32(nh + 2*nkv), 1}, dev.D1(128), &dev.QKVPostArgs{
					QKV: s.qkv, Bias: w.qkvBias, QNorm: w.qNorm, KNorm: w.kNorm, RopeCos: b.ropeCos, RopeSin: b.ropeSin,
					KCache: b.kcache[l], VCache: b.vcache[l], Pos: s.pos, RowSeq: s.rowSeq, Tables: s.tables,
					Rows: int32(rows), NumHeads: int32(nh), NumKVHeads: int32(nkv), HeadDim: int32(hd),
					BlockSize: int32(b.bs), MaxBlocks: int32(b.stride), KVF32: flag(b.kvF32), Eps: eps})
			},
			func() error {
				nd := len(p.decodeRows)
				if nd == 0 {
					return nil
				}
				if err := launch(d, dev.KAttnDecode, dev.Dim3{uint32(nd), uint32(nkv), uint32(parts)}, dev.D1(128), &dev.AttnDecodeArgs{
					QKV: s.qkv, KCache: b.kcache[l], VCache: b.vcache[l], Tables: s.tables, RowSeq: s.rowSeq, Pos: s.pos,
					Rows: s.decode, PartO: s.partO, PartM: s.partM, PartL: s.partL, NumRows: int32(nd), NumHeads: int32(nh),
					NumKVHeads: int32(nkv), HeadDim: int32(hd), BlockSize: int32(b.bs), MaxBlocks: int32(b.stride),
					MaxParts: int32(parts), KVF32: flag(b.kvF32), Scale: scale}); err != nil {
					return err
				}
				return launch(d, dev.KAttnMerge, dev.Dim3{uint32(nd), uint32(nh), 1}, dev.D1(128), &dev.AttnMergeArgs{
					Out: s.attn, PartO: s.partO, PartM: s.partM, PartL: s.partL, Rows: s.decode, Pos: s.pos,
					NumRows: int32(nd), NumHeads: int32(nh), HeadDim: int32(hd), MaxParts: int32(parts)})
			},
			func() error {
				nt := len(p.tiles) / 2
				if nt == 0 {
					return nil
				}
				return launch(d, dev.KAttnPrefill, dev.Dim3{uint32(nt), uint32(nh), 1}, dev.D1(128), &dev.AttnPrefillArgs{
					Out: s.attn, QKV: s.qkv, KCache: b.kcache[l], VCache: b.vcache[l], Tables: s.tables, RowSeq: s.rowSeq,
					Pos: s.pos, Tiles: s.tiles, NumTiles: int32(nt), NumHeads: int32(nh), NumKVHeads: int32(nkv),
					HeadDim: int32(hd), BlockSize: int32(b.bs), MaxBlocks: int32(b.stride), KVF32: flag(b.kvF32), Scale: scale})
			},
			func() error { return b.gemm(s.x, s.attn, w.o, rows, h, qDim, qDim, h, true, nd) },
			func() error {
				if w.oBias == 0 {
					return nil
				}
				return launch(d, dev.KResidualAdd, dev.D1(rows), blk, &dev.ResidualAddArgs{X: s.x, B: w.oBias, Rows: int32(rows), N: int32(h), Ld: int32(h)})
			},
			func() error {
				return launch(d, dev.KRMSNorm, dev.D1(rows), blk, &dev.RMSNormArgs{Out: s.xn, X: s.x, W: w.postNorm, Rows: int32(rows), H: int32(h), Eps: eps})
			},
			func() error { return b.gemm(s.gu, s.xn, w.gateUp, rows, 2*inter, h, h, 2*inter, false, nd) },
			func() error {
				return launch(d, dev.KSwiGLU, dev.D1(rows), blk, &dev.SwiGLUArgs{GU: s.gu, Rows: int32(rows), Inter: int32(inter)})
			},
			func() error { return b.gemm(s.x, s.gu, w.down, rows, h, inter, 2*inter, h, true, nd) },
		}
		for _, f := range steps {
			if err := f(); err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
		}
	}
	nl := len(p.logitRows)
	if nl == 0 {
		return nil
	}
	if err := launch(d, dev.KRMSNorm, dev.D1(nl), blk, &dev.RMSNormArgs{Out: s.sel, X: s.x, W: b.w.norm, RowIdx: s.logitRows, Rows: int32(nl), H: int32(h), Eps: eps}); err != nil {
		return err
	}
	return b.gemm(s.logits, s.sel, b.w.lmHead, nl, cfg.VocabSize, h, h, cfg.VocabSize, false, p.logitDecodeLead)
}

// run plans b and runs its forward pass on the device, leaving the logits rows in buf.logits.
func (b *Backend) run(ctx context.Context, batch *backend.Batch) (*plan, error) {
	if b.closed {
		return nil, errors.New("backend is closed")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pad, graph := 0, false
	if !b.tune.NoGraphs && decodeOnly(batch) {
		if pad = bucketFor(len(batch.Seqs)); pad > 0 {
			graph = true
		}
	}
	p, err := planBatch(batch, b.cfg.VocabSize, b.bs, b.numBlocks, b.stride, pad)
	if err != nil {
		return nil, err
	}
	if err := b.ensure(p); err != nil {
		return nil, err
	}
	if err := b.upload(p); err != nil {
		return nil, err
	}
	if !graph {
		return p, b.enqueue(p, p.maxParts)
	}
	g, ok := b.graphs[pad]
	if !ok {
		// The graph is captured at the buffers' partition capacity: a later step with longer
		// contexts that outgrows it regrows the buffers, which drops every graph.
		if err := b.d.BeginCapture(); err != nil {
			return nil, err
		}
		err := b.enqueue(p, b.buf.parts)
		var cerr error
		g, cerr = b.d.EndCapture()
		if err = errors.Join(err, cerr); err != nil {
			return nil, fmt.Errorf("capture decode graph of %d rows: %w", pad, err)
		}
		b.graphs[pad] = g
	}
	if err := b.d.LaunchGraph(g); err != nil {
		return nil, fmt.Errorf("decode graph of %d rows: %w", pad, err)
	}
	return p, nil
}

// Forward runs one step. See backend.Backend.
func (b *Backend) Forward(ctx context.Context, batch *backend.Batch) ([][]float32, error) {
	if batch == nil || len(batch.Seqs) == 0 {
		return nil, nil
	}
	var out [][]float32
	// the whole step on the device's goroutine: its launches go straight to the driver
	err := b.d.Run(func() error {
		p, err := b.run(ctx, batch)
		if err != nil {
			return err
		}
		want := make([]bool, len(batch.Seqs))
		for i := range want {
			want[i] = p.seqLogitN[i] > 0
		}
		out, err = b.hostRows(p, want)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda forward: %w", err)
	}
	return out, nil
}

// hostRows downloads the logits rows of the Seqs marked in want (each Seq's rows back to back).
func (b *Backend) hostRows(p *plan, want []bool) ([][]float32, error) {
	v := b.cfg.VocabSize
	n := 0
	for i, w := range want {
		if w {
			n = max(n, p.seqLogits[i]+p.seqLogitN[i])
		}
	}
	out := make([][]float32, len(want))
	if n == 0 {
		return out, nil
	}
	if cap(b.logits) < n*v {
		b.logits = make([]float32, n*v)
	}
	host := b.logits[:n*v]
	if err := b.d.Download(unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 4*len(host)), b.buf.logits); err != nil {
		return nil, err
	}
	for i, w := range want {
		if !w {
			continue
		}
		lo, hi := p.seqLogits[i]*v, (p.seqLogits[i]+p.seqLogitN[i])*v
		out[i] = host[lo:hi:hi]
	}
	return out, nil
}
