package cuda

import (
	"fmt"
	"log/slog"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// The GEMM paths. Decode rows (plan.decodeLead) always run the built-in decode kernels
// (gemv_*), which read each weight row once per dev.GemvRows rows and win at the skinny shapes
// of decode; the prompt rows run cuBLASLt (dev.Device.Matmul) for every bf16 weight whose shape
// it takes, else the built-in tiled kernel (gemm_bf16, gemm_q for quantized and f32 weights).
// The choice depends on a row's kind and the weight, never on how many rows a step has, so each
// row's arithmetic stays independent of the batch: cuBLASLt runs one algorithm per weight shape,
// chosen at open without split-K (internal/cublaslt.Plan). Tuning.LtDecodeRows trades that
// away for decode rows at large batches.

// ltShape is a weight's GEMM as the library sees it: N outputs, K inputs, output row stride
// Ldo (the bf16 activations are copied to rows of exactly K).
type ltShape struct{ n, k, ldo int }

// initLt prepares a cuBLASLt plan for each bf16 weight shape of the model; without the library
// (or with Tuning.NoCublasLt) every prompt GEMM runs on the built-in kernel, with one warning.
func (b *Backend) initLt() {
	if b.tune.NoCublasLt {
		return
	}
	name, err := b.d.MatmulLib()
	if err != nil {
		slog.Warn("cuBLASLt is unavailable: prompt GEMMs run on the built-in tiled kernel (see README, CUDA backend)", "err", err)
		return
	}
	cfg := b.cfg
	h, qDim, inter := cfg.HiddenSize, cfg.QDim(), cfg.IntermediateSize
	qkvDim := qDim + 2*cfg.KVDim()
	type use struct {
		w matrix
		s ltShape
	}
	var uses []use
	for i := range b.w.layers {
		l := &b.w.layers[i]
		uses = append(uses, use{l.qkv, ltShape{qkvDim, h, qkvDim}}, use{l.o, ltShape{h, qDim, h}},
			use{l.gateUp, ltShape{2 * inter, h, 2 * inter}}, use{l.down, ltShape{h, inter, h}})
	}
	uses = append(uses, use{b.w.lmHead, ltShape{cfg.VocabSize, h, cfg.VocabSize}})
	lt, refused := map[ltShape]bool{}, map[ltShape]bool{}
	for _, u := range uses {
		if u.w.q != 0 || u.w.f32 || lt[u.s] || refused[u.s] {
			continue
		}
		if err := b.d.Matmul(dev.MatmulArgs{N: u.s.n, K: u.s.k, Ldx: u.s.k, Ldo: u.s.ldo}); err != nil {
			slog.Warn("cuBLASLt refuses a weight shape: its prompt GEMMs run on the built-in tiled kernel", "n", u.s.n, "k", u.s.k, "err", err)
			refused[u.s] = true
			continue
		}
		lt[u.s] = true
	}
	if len(lt) > 0 {
		b.lt, b.ltName = lt, name
	}
}

// ltTakes reports a weight whose GEMMs run on the library.
func (b *Backend) ltTakes(w matrix, n, k, ldo int) bool {
	return b.lt != nil && w.q == 0 && !w.f32 && b.lt[ltShape{n, k, ldo}]
}

// ltGemm enqueues out (+)= x · wᵀ over m rows on the library: the rows rounded to bf16 into
// the step's xb buffer (as the built-in kernels round them when they read), then the GEMM.
func (b *Backend) ltGemm(out, x dev.Ptr, w matrix, m, n, k, ldx, ldo int, acc bool) error {
	xb := b.buf.xb
	if err := launch(b.d, dev.KCastBF16, dev.D1(m), dev.D1(256), &dev.CastArgs{Out: xb, X: x, Rows: int32(m), K: int32(k), Ldx: int32(ldx)}); err != nil {
		return err
	}
	if err := b.d.Matmul(dev.MatmulArgs{Out: out, X: xb, W: w.p, M: m, N: n, K: k, Ldx: k, Ldo: ldo, Accumulate: acc}); err != nil {
		return fmt.Errorf("cuBLASLt GEMM: %w", err)
	}
	return nil
}

// gemmName names what runs the prompt rows' GEMMs, for logs.
func (b *Backend) gemmName() string {
	if b.lt == nil {
		return "built-in tiled kernel"
	}
	return b.ltName
}
