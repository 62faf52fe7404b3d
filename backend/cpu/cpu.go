// Package cpu runs a model's forward pass on the CPU in float32 arithmetic over weights kept in
// their stored precision: the whole batch's tokens go through every projection as one product
// (package linear: streaming kernels for decode, blocked matrix products for prefill), and
// attention reads past keys and values from a paged KV cache (float32 or 16-bit) addressed
// through each sequence's block table.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/internal/parallel"
	"github.com/llmserve/llmserve/model"
)

// DefaultBlockSize is the number of token positions per KV block when Options.BlockSize is 0.
const DefaultBlockSize = 16

// gemmAttentionMinTokens is the prompt chunk length from which a sequence's attention runs as
// matrix products over a gathered copy of its keys and values; shorter chunks use direct dot
// products over the blocks, where a matrix product would not amortise its setup. With
// Deterministic every prompt chunk takes the (row-stable) matrix products.
const gemmAttentionMinTokens = 8

// Tuning is the CPU backend's own settings, passed as backend.Options.Tuning (a Tuning or a
// *Tuning; nil for the defaults).
type Tuning struct {
	// Threads bounds the goroutines used for attention, element-wise work and the weight
	// projections (package linear), except OpenBLAS's own threads in the widened prefill
	// products; GOMAXPROCS when 0.
	Threads int
	// BF16Activations rounds the activations that BF16 weights multiply to BF16, as llama.cpp
	// does: on CPUs with AVX512_BF16 batched decode and prefill run up to twice as fast, but a
	// sequence's results then depend on the batch it runs in (see package linear).
	BF16Activations bool
	// BatchDependent gives up batch invariance for speed: all rows of a step go through one
	// product on the fastest path for their count (register-blocked kernels, the widened GEMM
	// past linear.StreamMaxRows rows), so a sequence's logits change in the last bits with what
	// it is batched with. Batched decode of many sequences runs up to twice as fast.
	BatchDependent bool
	// Deterministic makes a prompt token's row independent of how the prompt is cut into
	// prefill chunks (which depends on the step's budget shared with other requests and on
	// prefix-cache hits): prompt rows go through row-stable products, and prompt attention
	// through them too, at about 0.75x the prefill speed. Ignored with BatchDependent or
	// BF16Activations.
	Deterministic bool
	// NoPrepack keeps the quantized weights only in their file layout: without it the layers'
	// and the LM head's Q8_0 weights get a copy packed for the multi-row integer kernels where
	// this machine runs them (linear.Multiplier.Prepack), as much memory again as those weights,
	// for faster batched decode and prefill with the same results bit for bit.
	NoPrepack bool
	// Kernels names the kernel set of the weight products (linear.KernelSets: "avx512bf16",
	// "avx512", "avx2", "go"); "" picks the fastest this machine runs. With "go" attention
	// runs without SIMD as well, so the whole forward is portable Go (tests compare the sets).
	Kernels string
}

// tuning reads opts.Tuning.
func tuning(opts *backend.Options) (Tuning, error) {
	switch t := opts.Tuning.(type) {
	case nil:
		return Tuning{}, nil
	case Tuning:
		return t, nil
	case *Tuning:
		if t == nil {
			return Tuning{}, nil
		}
		return *t, nil
	}
	return Tuning{}, fmt.Errorf("tuning of type %T is not the CPU backend's (cpu.Tuning)", opts.Tuning)
}

func init() {
	backend.Register("cpu", func(m *model.Model, opts backend.Options) (backend.Backend, error) { return New(m, opts) })
}

// Stats counts work done by Forward since the backend was made or ResetStats was called.
type Stats struct {
	Forwards int
	Tokens   int
	// GEMMFlops and GEMMTime cover the weight projections (q/k/v, o, gate/up, down, lm_head),
	// which are the bulk of the arithmetic; GEMMFlops / GEMMTime is the rate gemm reached.
	GEMMFlops float64
	GEMMTime  time.Duration
	// ForwardTime is the wall time spent in Forward.
	ForwardTime time.Duration
}

// Backend is the CPU implementation of backend.Backend. Forward must not be called concurrently.
type Backend struct {
	m         *model.Model
	cfg       model.Config
	numBlocks int
	blockSize int
	threads   int
	// attnGEMMMin is gemmAttentionMinTokens and attnTile is attnTileTokens, fields so tests can
	// force either attention path and small tiles.
	attnGEMMMin, attnTile int
	// simd enables the AVX2 attention kernels (haveSIMD, a field so tests can compare paths).
	simd bool

	// kv holds the keys and values of every layer.
	kv   *kvCache
	rope *ropeTable

	// Scratch, grown to the largest batch seen.
	x, xn, qkv, attn, gu []float32
	sel, logits          []float32
	// mul multiplies activations by the weight matrices (project).
	mul linear.Multiplier
	// batchDependent is Tuning.BatchDependent: rows are grouped for speed, not invariance.
	batchDependent bool
	// deterministic is Tuning.Deterministic (never with batchDependent or BF16Activations):
	// prompt rows on the row-stable products.
	deterministic bool
	rowPos        []int
	rowSeq        []int
	// groups are this step's row groups of the layers' products, headGroups the LM head's.
	groups, headGroups []rowGroup
	workers            []attnScratch
	// last is the layout of the last Forward's batch, whose rows b.x still holds (Hidden).
	last []seqSpan

	// kvPlan is how the KV pool was sized (for the start-up log).
	kvPlan backend.KVPlan

	stats  Stats
	closed bool
}

var _ backend.Backend = (*Backend)(nil)

// LogAttrs are the backend's settings for the start-up log (log/slog key-value pairs).
func (b *Backend) LogAttrs() []any {
	return []any{"kv_dtype", b.kv.typ, "threads", b.threads, "gemm", gemm.Impl(), "blas_core", gemm.Core(),
		"kernels", linear.Kernels(), "packed_weight_bytes", b.mul.PackedBytes(), "bf16_activations", b.mul.BF16Activations,
		"batch_invariant", !b.batchDependent && !b.mul.BF16Activations, "deterministic", b.deterministic}
}

// KVPlan says how the KV pool was sized.
func (b *Backend) KVPlan() backend.KVPlan { return b.kvPlan }

// availableRAM is the memory the kernel reports available (MemAvailable in /proc/meminfo:
// free memory plus what it can reclaim), read when the backend is made, so after the weights
// were loaded (package model copies them out of the files it maps, so they are not counted as
// reclaimable).
func availableRAM() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read available memory: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10, nil
				}
			}
			return 0, fmt.Errorf("/proc/meminfo: unreadable line %q", strings.TrimSpace(line))
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable line")
}

// attnScratch is one attention worker's private buffers.
type attnScratch struct {
	scores, keys, values, queries, out []float32
	// block receives one cache block's keys or values widened from a 16-bit cache.
	block []float32
}

// New allocates the KV cache for m and returns a backend ready to run it. The KV pool takes
// opts.NumBlocks blocks, or what opts.KVCacheBytes holds, or opts.KVCacheFraction of the RAM
// available now (after the weights are loaded; see availableRAM).
func New(m *model.Model, opts backend.Options) (*Backend, error) {
	if m == nil {
		return nil, errors.New("cpu backend: nil model")
	}
	cfg := m.Config
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if err := checkWeights(m); err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if opts.Device != 0 {
		return nil, fmt.Errorf("cpu backend: device index %d: the CPU is one device", opts.Device)
	}
	tune, err := tuning(&opts)
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if tune.Threads < 0 {
		return nil, fmt.Errorf("cpu backend: negative thread count %d", tune.Threads)
	}
	bs := opts.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	kvType, err := resolveKVDType(opts.KVCacheDType, m)
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	mul := linear.Multiplier{Threads: max(1, tune.Threads), BF16Activations: tune.BF16Activations}
	if !tune.NoPrepack {
		// Before the KV pool is sized, which counts the memory then available.
		if err := prepack(&mul, m); err != nil {
			return nil, fmt.Errorf("cpu backend: %w", err)
		}
	}
	perBlock := cfg.NumKVHeads * bs * cfg.HeadDim // elements per block per layer for K (and for V)
	bytesPerBlock := int64(2*cfg.NumLayers*perBlock) * int64(kvType.ElemBytes())
	plan, err := opts.KVBlocks(bytesPerBlock, availableRAM)
	if err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	numBlocks := plan.Blocks
	if numBlocks > math.MaxInt32 || int64(numBlocks)*int64(perBlock) > math.MaxInt/2 {
		return nil, fmt.Errorf("cpu backend: %d blocks is too many", numBlocks)
	}
	threads := tune.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	b := &Backend{
		m: m, cfg: cfg, numBlocks: numBlocks, blockSize: bs, threads: threads,
		attnGEMMMin: gemmAttentionMinTokens, attnTile: attnTileTokens, simd: haveSIMD,
		kv:             newKVCache(kvType, cfg.NumLayers, numBlocks*perBlock),
		rope:           newRopeTable(cfg),
		workers:        make([]attnScratch, threads),
		mul:            mul,
		batchDependent: tune.BatchDependent,
		deterministic:  tune.Deterministic && !tune.BatchDependent && !tune.BF16Activations,
		kvPlan:         plan,
	}
	if b.deterministic {
		b.attnGEMMMin = 1 // every prompt chunk on one path, whatever its length
	}
	b.mul.Threads = threads
	if err := b.mul.UseKernels(tune.Kernels); err != nil {
		return nil, fmt.Errorf("cpu backend: %w", err)
	}
	if tune.Kernels == "go" {
		b.simd = false
	}
	b.prefault()
	return b, nil
}

// prepack has mul repack the matrices of m's layers and its LM head for the multi-row kernels.
func prepack(mul *linear.Multiplier, m *model.Model) error {
	for i, l := range m.Layers {
		for _, w := range []model.Matrix{l.QKV, l.O, l.GateUp, l.Down} {
			if err := mul.Prepack(w); err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
		}
	}
	if err := mul.Prepack(m.LMHead); err != nil {
		return fmt.Errorf("lm_head: %w", err)
	}
	return nil
}

// prefault touches every page of the KV cache so the memory is committed now: a forward step
// then never stalls on the kernel zeroing fresh pages, and a cache too large for the machine
// shows at start-up rather than mid-request.
func (b *Backend) prefault() {
	b.parallelRows(2*b.kv.layers(), 1<<15, b.kv.touch)
}

// KVCacheDType is the KV cache's element type (never backend.KVAuto).
func (b *Backend) KVCacheDType() backend.KVDType { return b.kv.typ }

// NumBlocks is the number of KV blocks in the pool.
func (b *Backend) NumBlocks() int { return b.numBlocks }

// BlockSize is the number of positions per block.
func (b *Backend) BlockSize() int { return b.blockSize }

// VocabSize is the length of a logits row.
func (b *Backend) VocabSize() int { return b.cfg.VocabSize }

// Stats returns the work counters.
func (b *Backend) Stats() Stats { return b.stats }

// ResetStats zeroes the work counters.
func (b *Backend) ResetStats() { b.stats = Stats{} }

// Close releases the KV cache and scratch memory. Forward fails afterwards.
func (b *Backend) Close() error {
	b.closed = true
	b.kv = nil
	b.x, b.xn, b.qkv, b.attn, b.gu, b.sel, b.logits = nil, nil, nil, nil, nil, nil, nil
	b.workers, b.last = nil, nil
	return nil
}

// seqSpan is where one sequence's tokens sit in the batch's activation rows.
type seqSpan struct {
	seq   *backend.Seq
	start int // first row
	n     int // rows (tokens)
}

// plan validates the batch and lays its sequences out as consecutive activation rows.
func (b *Backend) plan(batch *backend.Batch) ([]seqSpan, int, int, error) {
	spans := make([]seqSpan, len(batch.Seqs))
	rows, maxCtx := 0, 0
	for i := range batch.Seqs {
		s := &batch.Seqs[i]
		if len(s.Tokens) == 0 {
			return nil, 0, 0, fmt.Errorf("seq %d: no tokens", i)
		}
		if s.Pos < 0 {
			return nil, 0, 0, fmt.Errorf("seq %d: negative position %d", i, s.Pos)
		}
		for _, t := range s.Tokens {
			if t < 0 || int(t) >= b.cfg.VocabSize {
				return nil, 0, 0, fmt.Errorf("seq %d: token id %d outside vocabulary of %d", i, t, b.cfg.VocabSize)
			}
		}
		end := s.Pos + len(s.Tokens)
		need := (end + b.blockSize - 1) / b.blockSize
		if len(s.BlockTable) < need {
			return nil, 0, 0, fmt.Errorf("seq %d: positions [0,%d) need %d blocks of %d, block table has %d",
				i, end, need, b.blockSize, len(s.BlockTable))
		}
		for j, blk := range s.BlockTable[:need] {
			if blk < 0 || int(blk) >= b.numBlocks {
				return nil, 0, 0, fmt.Errorf("seq %d: block table entry %d is %d, pool has %d blocks", i, j, blk, b.numBlocks)
			}
		}
		spans[i] = seqSpan{seq: s, start: rows, n: len(s.Tokens)}
		rows += len(s.Tokens)
		maxCtx = max(maxCtx, end)
	}
	return spans, rows, maxCtx, nil
}

// Forward runs one step for every sequence of batch. See backend.Backend.
func (b *Backend) Forward(ctx context.Context, batch *backend.Batch) ([][]float32, error) {
	if b.closed {
		return nil, errors.New("cpu forward: backend is closed")
	}
	if batch == nil || len(batch.Seqs) == 0 {
		return nil, nil
	}
	start := time.Now()
	spans, rows, maxCtx, err := b.plan(batch)
	if err != nil {
		return nil, fmt.Errorf("cpu forward: %w", err)
	}
	cfg := b.cfg
	h, qDim, kvDim, inter := cfg.HiddenSize, cfg.QDim(), cfg.KVDim(), cfg.IntermediateSize
	qkvDim := qDim + 2*kvDim

	b.x = grow(b.x, rows*h)
	b.xn = grow(b.xn, rows*h)
	b.qkv = grow(b.qkv, rows*qkvDim)
	b.attn = grow(b.attn, rows*qDim)
	b.gu = grow(b.gu, rows*2*inter)
	b.rowPos = growInts(b.rowPos, rows)
	b.rowSeq = growInts(b.rowSeq, rows)
	b.rope.ensure(maxCtx)
	for si, sp := range spans {
		for i, tok := range sp.seq.Tokens {
			r := sp.start + i
			b.rowPos[r] = sp.seq.Pos + i
			b.rowSeq[r] = si
			widenRow(b.m.Embed, int(tok), b.x[r*h:(r+1)*h])
		}
	}

	b.groups = b.rowGroups(b.groups, len(spans), func(i int) int { return spans[i].n },
		func(i int) int { return b.chunkPath(spans[i].seq, spans[i].n) })
	for l := range b.m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cpu forward: %w", err)
		}
		b.layer(l, spans, rows)
	}

	out := b.finish(spans)
	b.last = spans
	b.stats.Forwards++
	b.stats.Tokens += rows
	b.stats.ForwardTime += time.Since(start)
	return out, nil
}

// layer runs decoder layer l over all rows, updating b.x in place.
func (b *Backend) layer(l int, spans []seqSpan, rows int) {
	cfg := b.cfg
	w := &b.m.Layers[l]
	h, qDim, kvDim, inter, hd := cfg.HiddenSize, cfg.QDim(), cfg.KVDim(), cfg.IntermediateSize, cfg.HeadDim
	qkvDim := qDim + 2*kvDim
	eps := cfg.RMSNormEps

	b.parallelRows(rows, h, func(r int) {
		rmsNorm(b.xn[r*h:(r+1)*h], b.x[r*h:(r+1)*h], w.InputNorm, eps)
	})
	b.project(w.QKV, b.groups, b.xn, h, b.qkv, qkvDim, false)

	// Per row: bias, per-head norm, rotation, then the row's K and V go into its cache slot.
	bs, nkv := b.blockSize, cfg.NumKVHeads
	b.parallelRows(rows, qkvDim, func(r int) {
		row := b.qkv[r*qkvDim : (r+1)*qkvDim]
		if w.QKVBias != nil {
			for i, v := range w.QKVBias {
				row[i] += v
			}
		}
		pos := b.rowPos[r]
		for hh := range cfg.NumHeads + nkv {
			head := row[hh*hd : (hh+1)*hd]
			if w.QNorm != nil {
				if hh < cfg.NumHeads {
					rmsNorm(head, head, w.QNorm, eps)
				} else {
					rmsNorm(head, head, w.KNorm, eps)
				}
			}
			b.rope.apply(head, pos)
		}
		blk := int(spans[b.rowSeq[r]].seq.BlockTable[pos/bs])
		off := pos % bs
		for kh := range nkv {
			dst := ((blk*nkv+kh)*bs + off) * hd
			b.kv.store(l, dst, row[qDim+kh*hd:qDim+(kh+1)*hd], row[qDim+kvDim+kh*hd:qDim+kvDim+(kh+1)*hd], b.simd)
		}
	})

	b.attention(l, spans)

	b.project(w.O, b.groups, b.attn, qDim, b.x, h, true)
	if w.OBias != nil {
		addBias(b.x, rows, h, w.OBias)
	}
	b.parallelRows(rows, h, func(r int) {
		rmsNorm(b.xn[r*h:(r+1)*h], b.x[r*h:(r+1)*h], w.PostAttnNorm, eps)
	})
	b.project(w.GateUp, b.groups, b.xn, h, b.gu, 2*inter, false)
	b.parallelRows(rows, inter, func(r int) {
		row := b.gu[r*2*inter : (r+1)*2*inter]
		swiGLU(row[:inter], row[inter:], b.simd)
	})
	b.project(w.Down, b.groups, b.gu, 2*inter, b.x, h, true)
}

// finish applies the final norm and the LM head to the last row of every sequence that asked
// for logits, and to every row of those that asked for all of them.
func (b *Backend) finish(spans []seqSpan) [][]float32 {
	h, vocab := b.cfg.HiddenSize, b.cfg.VocabSize
	var want []int
	total := 0 // rows through the LM head
	for i, sp := range spans {
		switch {
		case sp.seq.AllLogits:
			want = append(want, i)
			total += sp.n
		case sp.seq.Logits:
			want = append(want, i)
			total++
		}
	}
	out := make([][]float32, len(spans))
	if len(want) == 0 {
		return out
	}
	b.sel = grow(b.sel, total*h)
	b.logits = grow(b.logits, total*vocab)
	j := 0
	for _, i := range want {
		first := spans[i].start + spans[i].n - 1
		if spans[i].seq.AllLogits {
			first = spans[i].start
		}
		for r := first; r < spans[i].start+spans[i].n; r++ {
			rmsNorm(b.sel[j*h:(j+1)*h], b.x[r*h:(r+1)*h], b.m.Norm, b.cfg.RMSNormEps)
			j++
		}
	}
	headRows := func(j int) int {
		if spans[want[j]].seq.AllLogits {
			return spans[want[j]].n
		}
		return 1
	}
	// Every logits row streams, as a decode's: an LM head row is then the same bits whether it
	// ends a prompt, rides in a prompt's AllLogits rows or follows a decode.
	b.headGroups = b.rowGroups(b.headGroups, len(want), headRows, func(int) int { return pathRows })
	b.project(b.m.LMHead, b.headGroups, b.sel, h, b.logits, vocab, false)
	j = 0
	for _, i := range want {
		k := 1
		if spans[i].seq.AllLogits {
			k = spans[i].n
		}
		out[i] = b.logits[j*vocab : (j+k)*vocab : (j+k)*vocab]
		j += k
	}
	return out
}

// parallelRows calls fn for every row in [0, rows), spread over the worker goroutines when the
// work (rows × cost floats) is large enough to pay for them.
func (b *Backend) parallelRows(rows, cost int, fn func(r int)) {
	workers := b.threads
	if rows*cost < 1<<15 {
		workers = 1
	}
	parallel.For(rows, workers, func(_, r int) { fn(r) })
}

// grow returns buf resliced to n elements, reallocating when it is too small. Contents are
// not preserved.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func growInts(buf []int, n int) []int {
	if cap(buf) < n {
		return make([]int, n)
	}
	return buf[:n]
}
