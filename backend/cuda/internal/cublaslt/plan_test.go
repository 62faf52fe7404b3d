package cublaslt

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// ltMatmul is cuBLASLt's documented semantics for one problem, column-major:
// D[i + j·ldc] = alpha·Σ_l op(A)[i][l]·op(B)[l][j] + beta·C[i + j·ldc], op(X) = X or Xᵀ.
func ltMatmul(p Problem, a, b, d []float64, alpha, beta float64) {
	get := func(buf []float64, l Layout, trans int32, i, j int) float64 {
		if trans == opT {
			i, j = j, i
		}
		if uint64(i) >= l.Rows || uint64(j) >= l.Cols {
			panic("operand index outside its layout")
		}
		return buf[i+j*int(l.Ld)]
	}
	m := int(p.C.Rows)
	n := int(p.C.Cols)
	k := int(p.A.Rows)
	if p.TransA == opN {
		k = int(p.A.Cols)
	}
	for i := range m {
		for j := range n {
			var s float64
			for l := range k {
				s += get(a, p.A, p.TransA, i, l) * get(b, p.B, p.TransB, l, j)
			}
			d[i+j*int(p.C.Ld)] = alpha*s + beta*d[i+j*int(p.C.Ld)]
		}
	}
}

// The layout Problem derives, run through cuBLASLt's column-major semantics on the backend's
// row-major buffers (W [N][K], X rows of stride Ldx, Out rows of stride Ldo), computes
// Out[r][n] (+)= Σ_k X[r][k]·W[n][k], touching no padding.
func TestProblemIsRowMajorXWt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []Shape{{N: 24, K: 16, Ldx: 16, Ldo: 24}, {N: 8, K: 40, Ldx: 48, Ldo: 12}} {
		for _, rows := range []int{1, 3, 7} {
			p := s.Problem(rows)
			if p.A.Type != dataR16BF || p.B.Type != dataR16BF || p.C.Type != dataR32F {
				t.Fatalf("types %d %d %d, want bf16 A and B, f32 C/D", p.A.Type, p.B.Type, p.C.Type)
			}
			w := make([]float64, s.N*s.K)
			x := make([]float64, rows*s.Ldx)
			out := make([]float64, rows*s.Ldo)
			for _, v := range [][]float64{w, x, out} {
				for i := range v {
					v[i] = rng.Float64()*2 - 1
				}
			}
			for _, acc := range []bool{false, true} {
				want := append([]float64(nil), out...)
				for r := range rows {
					for n := range s.N {
						var sum float64
						for k := range s.K {
							sum += x[r*s.Ldx+k] * w[n*s.K+k]
						}
						if acc {
							want[r*s.Ldo+n] += sum
						} else {
							want[r*s.Ldo+n] = sum
						}
					}
				}
				got := append([]float64(nil), out...)
				beta := 0.0
				if acc {
					beta = 1
				}
				ltMatmul(p, w, x, got, 1, beta)
				for i := range got {
					if d := got[i] - want[i]; d > 1e-12 || d < -1e-12 {
						t.Fatalf("shape %+v rows %d accumulate %v: element %d (row %d col %d) is %g, want %g",
							s, rows, acc, i, i/s.Ldo, i%s.Ldo, got[i], want[i])
					}
				}
			}
		}
	}
}

func TestShapeCheck(t *testing.T) {
	for _, c := range []struct {
		s  Shape
		ok bool
	}{
		{Shape{N: 3072, K: 1024, Ldx: 1024, Ldo: 3072}, true},
		{Shape{N: 151936, K: 1024, Ldx: 1024, Ldo: 151936}, true},
		{Shape{N: 70, K: 33, Ldx: 33, Ldo: 70}, false}, // 66-byte bf16 rows
		{Shape{N: 70, K: 32, Ldx: 32, Ldo: 70}, false}, // 280-byte f32 rows
		{Shape{N: 64, K: 64, Ldx: 32, Ldo: 64}, false},
		{Shape{N: 0, K: 64, Ldx: 64, Ldo: 64}, false},
	} {
		if err := c.s.Check(); (err == nil) != c.ok {
			t.Errorf("%+v: Check() = %v, want ok=%v", c.s, err, c.ok)
		}
	}
}

// pick keeps the heuristic's order but never an algorithm that splits K or needs a reduction.
func TestPickRejectsSplitK(t *testing.T) {
	cs := []candidate{
		{state: StatusSuccess, splitK: 4, reduction: 1},
		{state: StatusNotSupported, splitK: 1},
		{state: StatusSuccess, splitK: 1, reduction: 2},
		{state: StatusSuccess, splitK: 1, workspace: WorkspaceBytes + 1},
		{state: StatusSuccess, splitK: 1},
		{state: StatusSuccess, splitK: 0},
	}
	if i, err := pick(cs, WorkspaceBytes); i != 4 || err != nil {
		t.Fatalf("pick = %d, %v; want 4", i, err)
	}
	if i, err := pick(cs[5:], WorkspaceBytes); i != 0 || err != nil {
		t.Fatalf("SPLITK_NUM 0 (unset) is one pass: pick = %d, %v", i, err)
	}
	_, err := pick(cs[:4], WorkspaceBytes)
	if err == nil {
		t.Fatal("no usable candidate, yet pick succeeded")
	}
	for _, want := range []string{"split-K 4", "CUBLAS_STATUS_NOT_SUPPORTED", "reduction scheme 2", "workspace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := pick(nil, WorkspaceBytes); err == nil || !strings.Contains(err.Error(), "no algorithm") {
		t.Fatalf("empty heuristic: %v", err)
	}
}

func TestStatusNames(t *testing.T) {
	for s, want := range map[Status]string{
		StatusSuccess: "CUBLAS_STATUS_SUCCESS", StatusInvalidValue: "CUBLAS_STATUS_INVALID_VALUE",
		StatusNotSupported: "CUBLAS_STATUS_NOT_SUPPORTED", StatusExecutionFailed: "CUBLAS_STATUS_EXECUTION_FAILED",
		99: "cublasStatus_t 99",
	} {
		if s.String() != want {
			t.Errorf("Status(%d) = %q, want %q", int32(s), s, want)
		}
	}
	e := &Error{Op: "cublasLtMatmul", Status: StatusArchMismatch}
	if e.Error() != "cublasLtMatmul: CUBLAS_STATUS_ARCH_MISMATCH" {
		t.Fatalf("error text %q", e)
	}
}

// Every function a plan calls is bound by name, once.
func TestSymbolsBindEveryFunction(t *testing.T) {
	var f funcs
	seen := map[string]bool{}
	for _, s := range f.symbols() {
		if seen[s.name] || !strings.HasPrefix(s.name, "cublasLt") {
			t.Fatalf("symbol %q repeated or misnamed", s.name)
		}
		seen[s.name] = true
		*s.addr = 1
	}
	for i, a := range []uintptr{f.create, f.destroy, f.descCreate, f.descSetAttr, f.descDestroy, f.layoutCreate,
		f.layoutDestroy, f.prefCreate, f.prefSetAttr, f.prefDestroy, f.heuristic, f.algoConfigGetAttr, f.matmulCall} {
		if a != 1 {
			t.Fatalf("function %d is not bound by symbols()", i)
		}
	}
}
