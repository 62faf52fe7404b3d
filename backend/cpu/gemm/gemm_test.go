package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

type mulFunc func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate bool)

// shape is one test case; pad widens each leading dimension beyond its minimum.
type shape struct{ m, n, k, pad int }

var testShapes = []shape{
	{1, 1, 1, 0}, {1, 7, 5, 3}, {3, 5, 7, 1}, {2, 4, 4, 0}, {1, 33, 1029, 2},
	{8, 61, 257, 5}, {5, 130, 515, 0}, {17, 19, 23, 4}, {67, 45, 600, 3},
	{70, 150, 1100, 1}, {4, 300, 64, 0}, {129, 71, 13, 2},
}

func randMatrix(rng *rand.Rand, rows, cols, ld int) []float32 {
	x := make([]float32, (rows-1)*ld+cols+ld-cols) // the padding after the last row stays unread
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// reference computes C (+)= A·op(B) in float64, where op(B) is Bᵀ when transB is set.
func reference(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, accumulate, transB bool) []float64 {
	out := make([]float64, len(c))
	for i := range c {
		out[i] = float64(c[i])
	}
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var bv float32
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(a[i*lda+p]) * float64(bv)
			}
			if accumulate {
				out[i*ldc+j] += s
			} else {
				out[i*ldc+j] = s
			}
		}
	}
	return out
}

func checkMul(t *testing.T, name string, f mulFunc, transB bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range testShapes {
		for _, accumulate := range []bool{false, true} {
			lda, ldc := s.k+s.pad, s.n+s.pad+1
			var b []float32
			var ldb int
			if transB {
				ldb = s.k + s.pad
				b = randMatrix(rng, s.n, s.k, ldb)
			} else {
				ldb = s.n + s.pad
				b = randMatrix(rng, s.k, s.n, ldb)
			}
			a := randMatrix(rng, s.m, s.k, lda)
			c := randMatrix(rng, s.m, s.n, ldc)
			want := reference(s.m, s.n, s.k, a, lda, b, ldb, c, ldc, accumulate, transB)
			f(s.m, s.n, s.k, a, lda, b, ldb, c, ldc, accumulate)
			for idx := range c {
				i, j := idx/ldc, idx%ldc
				tol := 1e-5 * (1 + float64(s.k))
				if j >= s.n || i >= s.m {
					tol = 0 // outside the output: must be untouched
				}
				if d := math.Abs(float64(c[idx]) - want[idx]); d > tol {
					t.Fatalf("%s m=%d n=%d k=%d pad=%d accumulate=%v: C[%d][%d] = %v, want %v",
						name, s.m, s.n, s.k, s.pad, accumulate, i, j, c[idx], want[idx])
				}
			}
		}
	}
}

func TestMatMulNTGo(t *testing.T) { checkMul(t, "matMulNTGo", matMulNTGo, true) }

// TestMatMulNTGoPortable checks the plain-Go kernel on machines where the assembly one runs.
func TestMatMulNTGoPortable(t *testing.T) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	checkMul(t, "matMulNTGo (portable)", matMulNTGo, true)
}
func TestMatMulNNGo(t *testing.T) { checkMul(t, "matMulNNGo", matMulNNGo, false) }

func TestMatMulNNGoPortable(t *testing.T) {
	saved := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = saved }()
	checkMul(t, "matMulNNGo (portable)", matMulNNGo, false)
}
func TestMatMulNT(t *testing.T) { checkMul(t, "MatMulNT/"+Impl(), MatMulNT, true) }
func TestMatMulNN(t *testing.T) { checkMul(t, "MatMulNN/"+Impl(), MatMulNN, false) }
func TestMatMulNTSerial(t *testing.T) {
	checkMul(t, "MatMulNTSerial/"+Impl(), MatMulNTSerial, true)
}
func TestMatMulNNSerial(t *testing.T) {
	checkMul(t, "MatMulNNSerial/"+Impl(), MatMulNNSerial, false)
}

func TestImpl(t *testing.T) {
	if got := Impl(); got != "openblas" && got != "go" {
		t.Fatalf("Impl() = %q, want openblas or go", got)
	}
}

// With k == 0 the product is zero: C is cleared, or left alone when accumulating.
func TestZeroK(t *testing.T) {
	for _, f := range []mulFunc{MatMulNT, MatMulNN} {
		c := []float32{1, 2, 3, 4, 5, 6}
		f(2, 3, 0, nil, 1, nil, 3, c, 3, true)
		if c[5] != 6 {
			t.Fatalf("accumulate with k=0 changed C: %v", c)
		}
		f(2, 3, 0, nil, 1, nil, 3, c, 3, false)
		for _, v := range c {
			if v != 0 {
				t.Fatalf("k=0 without accumulate left C = %v, want zeros", c)
			}
		}
	}
}

func TestEmptyOutputIsNoOp(t *testing.T) {
	MatMulNT(0, 4, 4, nil, 4, make([]float32, 16), 4, nil, 4, false)
	MatMulNN(4, 0, 4, make([]float32, 16), 4, nil, 1, nil, 1, false)
}

func TestShapeErrorsPanic(t *testing.T) {
	cases := []struct {
		name string
		call func()
		want string
	}{
		{"short A", func() { MatMulNT(2, 2, 3, make([]float32, 5), 3, make([]float32, 6), 3, make([]float32, 4), 2, false) }, "A is 2x3"},
		{"short B", func() { MatMulNN(2, 2, 3, make([]float32, 6), 3, make([]float32, 5), 2, make([]float32, 4), 2, false) }, "B is 3x2"},
		{"short C", func() { MatMulNT(2, 2, 3, make([]float32, 6), 3, make([]float32, 6), 3, make([]float32, 3), 2, false) }, "C is 2x2"},
		{"small lda", func() { MatMulNT(2, 2, 3, make([]float32, 6), 2, make([]float32, 6), 3, make([]float32, 4), 2, false) }, "leading dimension of A"},
		{"negative", func() { MatMulNN(-1, 2, 3, nil, 3, nil, 2, nil, 2, false) }, "negative dimension"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Fatalf("panic = %v, want one mentioning %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

// TestCoreType checks that OpenBLAS, where it loads, runs the kernel family chosen for this CPU
// rather than the generic one it may detect on its own.
func TestCoreType(t *testing.T) {
	if Impl() != "openblas" {
		t.Skip("OpenBLAS not loaded in this build")
	}
	core := Core()
	if testing.Verbose() {
		t.Logf("OpenBLAS core %q", core)
	}
	want := strings.ToLower(os.Getenv("OPENBLAS_CORETYPE"))
	if want != "" && !strings.EqualFold(core, want) {
		t.Errorf("OpenBLAS runs %q kernels, OPENBLAS_CORETYPE is %q", core, want)
	}
}
