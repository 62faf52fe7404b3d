package cublaslt

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// PlanRows is the row count a plan's algorithm is chosen for: a typical prompt chunk. The
// algorithm is then used for every row count (see Plan).
const PlanRows = 512

// WorkspaceBytes is the device workspace a plan may use (the heuristic only offers algorithms
// that fit; 32 MiB is what NVIDIA's cuBLAS documentation recommends for Hopper).
const WorkspaceBytes = 32 << 20

// Align is the byte alignment every operand's address and row stride must have: plans ask the
// heuristic for algorithms that need no more (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES), so
// an output that starts a few rows into a buffer is still a valid operand.
const Align = 16

// Shape is one weight's GEMM: Out[r][n] (+)= Σ_k X[r][k] · W[n][k] for the rows r of a call.
// W is bf16 stored row-major [N][K] (Hugging Face's [out][in], as the CPU backend keeps it), X
// bf16 rows of stride Ldx elements, Out f32 rows of stride Ldo elements; f32 accumulation.
type Shape struct {
	// N is the weight's output count (its rows), K its input count (its columns).
	N, K int
	// Ldx and Ldo are the row strides of X and Out, in elements.
	Ldx, Ldo int
}

// Check reports a shape no plan takes: strides below the row lengths, or rows that are not
// whole multiples of Align bytes (K, Ldx in bf16; Ldo in f32).
func (s Shape) Check() error {
	switch {
	case s.N <= 0 || s.K <= 0:
		return fmt.Errorf("cuBLASLt shape N=%d K=%d: both must be positive", s.N, s.K)
	case s.Ldx < s.K || s.Ldo < s.N:
		return fmt.Errorf("cuBLASLt shape N=%d K=%d: strides Ldx=%d Ldo=%d below the row lengths", s.N, s.K, s.Ldx, s.Ldo)
	case (2*s.K)%Align != 0 || (2*s.Ldx)%Align != 0 || (4*s.Ldo)%Align != 0:
		return fmt.Errorf("cuBLASLt shape N=%d K=%d Ldx=%d Ldo=%d: bf16 rows of K and Ldx and f32 rows of Ldo must be multiples of %d bytes", s.N, s.K, s.Ldx, s.Ldo, Align)
	}
	return nil
}

// Layout is a matrix as cublasLtMatrixLayoutCreate takes it: element type, rows, columns and
// leading dimension of a column-major matrix (CUBLASLT_ORDER_COL, the default order).
type Layout struct {
	Type int32
	Rows uint64
	Cols uint64
	Ld   int64
}

// Problem is one cublasLtMatmul call's description: D = op(A) · op(B) (+ C), column-major, with
// C and D the same layout and buffer.
type Problem struct {
	// TransA and TransB are cublasOperation_t values.
	TransA, TransB int32
	A, B, C        Layout
}

// Problem describes rows rows of s to cuBLASLt, which is column-major. Row-major storage of an
// [R][C] matrix with row stride ld is the column-major C×R matrix with leading dimension ld
// (its transpose), so:
//
//   - Out, row-major [rows][Ldo] f32, is D: column-major N×rows, ld Ldo. Each call row is a
//     column of D.
//   - W, row-major [N][K] bf16, is column-major K×N with ld K; TRANSA = T makes op(A) the N×K
//     matrix W itself.
//   - X, row-major [rows][Ldx] bf16, is column-major K×rows with ld Ldx: B with TRANSB = N.
//
// Then D (N×rows) = op(A) (N×K) · B (K×rows): D[n][r] = Σ_k W[n][k] X[r][k], that is
// Out[r][n]. This is cuBLAS's "TN" case, the layout its BF16 kernels serve best. The
// library's m, n and k are N, rows and K.
func (s Shape) Problem(rows int) Problem {
	return Problem{
		TransA: opT,
		TransB: opN,
		A:      Layout{Type: dataR16BF, Rows: uint64(s.K), Cols: uint64(s.N), Ld: int64(s.K)},
		B:      Layout{Type: dataR16BF, Rows: uint64(s.K), Cols: uint64(rows), Ld: int64(s.Ldx)},
		C:      Layout{Type: dataR32F, Rows: uint64(s.N), Cols: uint64(rows), Ld: int64(s.Ldo)},
	}
}

// candidate is what a plan reads of one heuristic result.
type candidate struct {
	// state is the result's status, workspace the bytes the algorithm needs.
	state     Status
	workspace uint64
	// splitK and reduction are CUBLASLT_ALGO_CONFIG_SPLITK_NUM and _REDUCTION_SCHEME.
	splitK, reduction uint32
}

// pick returns the first candidate (the heuristic's best first) that computes every output
// element in one pass over K: no split-K (SPLITK_NUM 0 or 1) and no reduction scheme. A split
// algorithm sums partial products over K in an order and a partition that the library may
// choose by problem size, so a row's result could depend on how many rows came with it.
func pick(cs []candidate, maxWorkspace uint64) (int, error) {
	var why []string
	for i, c := range cs {
		switch {
		case c.state != StatusSuccess:
			why = append(why, fmt.Sprintf("#%d: %s", i, c.state))
		case c.splitK > 1 || c.reduction != reductionNone:
			why = append(why, fmt.Sprintf("#%d: split-K %d, reduction scheme %d", i, c.splitK, c.reduction))
		case c.workspace > maxWorkspace:
			why = append(why, fmt.Sprintf("#%d: needs %d bytes of workspace", i, c.workspace))
		default:
			return i, nil
		}
	}
	if len(cs) == 0 {
		return -1, errors.New("the heuristic offered no algorithm")
	}
	return -1, fmt.Errorf("every algorithm the heuristic offered splits K or is unusable (%s)", strings.Join(why, "; "))
}

// Handle is a cuBLASLt handle. Its methods, and those of its plans, must run on the goroutine
// where the device's context is current (the CUDA backend's device goroutine).
type Handle struct {
	lib *Lib
	h   uintptr
}

// NewHandle creates a handle (cublasLtCreate).
func (l *Lib) NewHandle() (*Handle, error) {
	var h uintptr
	if err := l.call("cublasLtCreate", l.fns.create, uintptr(unsafe.Pointer(&h))); err != nil {
		return nil, err
	}
	return &Handle{lib: l, h: h}, nil
}

// Destroy releases the handle (cublasLtDestroy).
func (h *Handle) Destroy() error {
	return h.lib.call("cublasLtDestroy", h.lib.fns.destroy, h.h)
}

// Plan is a Shape's GEMM with its algorithm chosen once.
//
// Batch invariance: every call of a plan, whatever its row count, runs the same algorithm (the
// same kernel, tile, stages and K order), and that algorithm splits nothing over K, so each
// output element is one CTA's single pass over K in a fixed order. A row of Out is a column of
// D, and what a column gets depends on its tile's position, not on how many tiles there are —
// this is what the plan relies on; it is not a documented cuBLASLt guarantee, so the GPU tests
// check it bit for bit (TestKernelLtGemm: rows alone and in larger calls).
type Plan struct {
	h     *Handle
	shape Shape
	// desc is the matmul descriptor (compute 32F, scale 32F, TRANSA=T, TRANSB=N), a the
	// weight's layout; both live as long as the plan.
	desc, a uintptr
	// algo is the chosen cublasLtMatmulAlgo_t, workspace the bytes it needs.
	algo      [algoBytes / 8]uint64
	workspace uint64
	// TileID is the algorithm's CUBLASLT_ALGO_CONFIG_TILE_ID and AlgoID its
	// CUBLASLT_ALGO_CONFIG_ID, for logs.
	TileID, AlgoID int32
}

// setAttr sets one 4- or 8-byte attribute through setter (the descriptor and preference
// SetAttribute functions share the signature).
func (h *Handle) setAttr(op string, fn, obj uintptr, attr int, v uint64, size int) error {
	return h.lib.call(op, fn, obj, uintptr(attr), uintptr(unsafe.Pointer(&v)), uintptr(size))
}

// layout creates a matrix layout.
func (h *Handle) layout(l Layout) (uintptr, error) {
	var p uintptr
	err := h.lib.call("cublasLtMatrixLayoutCreate", h.lib.fns.layoutCreate, uintptr(unsafe.Pointer(&p)),
		uintptr(l.Type), uintptr(l.Rows), uintptr(l.Cols), uintptr(l.Ld))
	return p, err
}

func (h *Handle) destroyLayout(p uintptr) error {
	if p == 0 {
		return nil
	}
	return h.lib.call("cublasLtMatrixLayoutDestroy", h.lib.fns.layoutDestroy, p)
}

// NewPlan describes s, asks the heuristic for algorithms at PlanRows rows within
// WorkspaceBytes and operands aligned to Align bytes, and keeps the first that does not split
// K (see pick).
func (h *Handle) NewPlan(s Shape) (_ *Plan, err error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	f := &h.lib.fns
	p := &Plan{h: h, shape: s}
	defer func() {
		if err != nil {
			_ = p.Destroy()
			err = fmt.Errorf("cuBLASLt plan for N=%d K=%d: %w", s.N, s.K, err)
		}
	}()
	if err := h.lib.call("cublasLtMatmulDescCreate", f.descCreate, uintptr(unsafe.Pointer(&p.desc)), computeType32F, dataR32F); err != nil {
		return nil, err
	}
	for _, a := range []struct{ attr, v int }{{descTransA, opT}, {descTransB, opN}} {
		if err := h.setAttr("cublasLtMatmulDescSetAttribute", f.descSetAttr, p.desc, a.attr, uint64(a.v), 4); err != nil {
			return nil, err
		}
	}
	prob := s.Problem(PlanRows)
	if p.a, err = h.layout(prob.A); err != nil {
		return nil, err
	}
	b, err := h.layout(prob.B)
	defer func() { _ = h.destroyLayout(b) }()
	if err != nil {
		return nil, err
	}
	c, err := h.layout(prob.C)
	defer func() { _ = h.destroyLayout(c) }()
	if err != nil {
		return nil, err
	}
	var pref uintptr
	if err := h.lib.call("cublasLtMatmulPreferenceCreate", f.prefCreate, uintptr(unsafe.Pointer(&pref))); err != nil {
		return nil, err
	}
	defer func() { _ = h.lib.call("cublasLtMatmulPreferenceDestroy", f.prefDestroy, pref) }()
	if err := h.setAttr("cublasLtMatmulPreferenceSetAttribute", f.prefSetAttr, pref, prefMaxWorkspaceBytes, WorkspaceBytes, 8); err != nil {
		return nil, err
	}
	for _, attr := range []int{prefMinAlignA, prefMinAlignB, prefMinAlignC, prefMinAlignD} {
		if err := h.setAttr("cublasLtMatmulPreferenceSetAttribute", f.prefSetAttr, pref, attr, Align, 4); err != nil {
			return nil, err
		}
	}
	const want = 16
	results := make([]uint64, want*heuristicBytes/8)
	var got int32
	if err := h.lib.call("cublasLtMatmulAlgoGetHeuristic", f.heuristic, h.h, p.desc, p.a, b, c, c, pref, want,
		uintptr(unsafe.Pointer(&results[0])), uintptr(unsafe.Pointer(&got))); err != nil {
		return nil, err
	}
	cs := make([]candidate, got)
	for i := range cs {
		r := results[i*heuristicBytes/8:]
		cs[i].workspace = r[algoBytes/8]
		cs[i].state = Status(int32(r[algoBytes/8+1]))
		algo := (*[algoBytes / 8]uint64)(r)
		if cs[i].splitK, err = h.algoConfig(algo, algoConfigSplitKNum); err != nil {
			return nil, err
		}
		if cs[i].reduction, err = h.algoConfig(algo, algoConfigReductionScheme); err != nil {
			return nil, err
		}
	}
	i, err := pick(cs, WorkspaceBytes)
	if err != nil {
		return nil, err
	}
	copy(p.algo[:], results[i*heuristicBytes/8:])
	p.workspace = cs[i].workspace
	tile, err := h.algoConfig(&p.algo, algoConfigTileID)
	if err != nil {
		return nil, err
	}
	id, err := h.algoConfig(&p.algo, algoConfigID)
	if err != nil {
		return nil, err
	}
	p.TileID, p.AlgoID = int32(tile), int32(id)
	return p, nil
}

// algoConfig reads a 4-byte configuration attribute of algo
// (cublasLtMatmulAlgoConfigGetAttribute).
func (h *Handle) algoConfig(algo *[algoBytes / 8]uint64, attr int) (uint32, error) {
	var v uint32
	var written uint64
	err := h.lib.call("cublasLtMatmulAlgoConfigGetAttribute", h.lib.fns.algoConfigGetAttr, uintptr(unsafe.Pointer(algo)),
		uintptr(attr), uintptr(unsafe.Pointer(&v)), 4, uintptr(unsafe.Pointer(&written)))
	return v, err
}

// Matmul enqueues Out (+)= X · Wᵀ over rows rows on stream (a CUstream, which is a
// cudaStream_t) with the plan's algorithm; out, x and w are device addresses aligned to Align,
// workspace one of at least WorkspaceBytes that no concurrent call uses. With accumulate, beta
// is 1 and Out is read as C (in place: C and D are the same buffer and layout).
func (p *Plan) Matmul(stream, out, x, w, workspace uintptr, rows int, accumulate bool) error {
	if rows <= 0 {
		return nil
	}
	for _, a := range []uintptr{out, x, w, workspace} {
		if a%Align != 0 {
			return fmt.Errorf("cuBLASLt N=%d K=%d: operand %#x is not %d-byte aligned", p.shape.N, p.shape.K, a, Align)
		}
	}
	h := p.h
	prob := p.shape.Problem(rows)
	b, err := h.layout(prob.B)
	defer func() { _ = h.destroyLayout(b) }()
	if err != nil {
		return err
	}
	c, err := h.layout(prob.C)
	defer func() { _ = h.destroyLayout(c) }()
	if err != nil {
		return err
	}
	// pointer mode host (the default): alpha and beta are read during the call, so a captured
	// graph keeps these values
	scale := [2]float32{1, 0}
	if accumulate {
		scale[1] = 1
	}
	return h.lib.call("cublasLtMatmul", h.lib.fns.matmulCall, h.h, p.desc,
		uintptr(unsafe.Pointer(&scale[0])), w, p.a, x, b, uintptr(unsafe.Pointer(&scale[1])), out, c, out, c,
		uintptr(unsafe.Pointer(&p.algo)), workspace, WorkspaceBytes, stream)
}

// Destroy releases the plan's descriptors.
func (p *Plan) Destroy() error {
	var errs []error
	if p.a != 0 {
		errs = append(errs, p.h.destroyLayout(p.a))
		p.a = 0
	}
	if p.desc != 0 {
		errs = append(errs, p.h.lib.call("cublasLtMatmulDescDestroy", p.h.lib.fns.descDestroy, p.desc))
		p.desc = 0
	}
	return errors.Join(errs...)
}
