package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// tolLt bounds cuBLASLt against the reference: both multiply the same bf16 operands exactly in
// f32 and sum in f32, in different orders (about 1e-7 relative); a wrong layout or operand is
// off by O(1).
const tolLt = 1e-4

// ltModelShapes are the prompt GEMMs of Qwen3-0.6B and Llama-3.1-8B: {N, K} per weight.
var ltModelShapes = []struct {
	name string
	n, k int
}{
	{"qwen3-0.6b qkv", 4096, 1024}, {"qwen3-0.6b o", 1024, 2048}, {"qwen3-0.6b gate_up", 6144, 1024},
	{"qwen3-0.6b down", 1024, 3072}, {"qwen3-0.6b lm_head", 151936, 1024},
	{"llama-8b qkv", 6144, 4096}, {"llama-8b o", 4096, 4096}, {"llama-8b gate_up", 28672, 4096},
	{"llama-8b down", 4096, 14336},
}

// TestKernelLtGemm checks the library GEMM on GPU 0: against the Go reference (cast_bf16 and
// Matmul, plain and accumulating, into an output that starts rows into its buffer); against the
// built-in gemm_bf16 at the model shapes, with their times logged; and batch invariance, the
// property the pinned algorithm is for: each row bit for bit the same computed alone, in a
// group of 7 and in the whole call.
func TestKernelLtGemm(t *testing.T) {
	g := gpuOrSkip(t)
	name, err := g.MatmulLib()
	if err != nil {
		if requireGPU {
			t.Fatalf("GPU without cuBLASLt, and %s=1: %v", RequireGPUEnv, err)
		}
		t.Skipf("no cuBLASLt: %v", err)
	}
	t.Logf("library GEMM: %s", name)
	t.Run("reference", func(t *testing.T) { kernelLtReference(t, g) })
	for _, s := range ltModelShapes {
		if small() && s.n*s.k > 8<<20 {
			continue
		}
		t.Run(s.name, func(t *testing.T) { kernelLtShape(t, g, 512, s.n, s.k) })
	}
}

func kernelLtReference(t *testing.T, g dev.Device) {
	shapes := [][3]int{{64, 4096, 1024}, {37, 1024, 3072}, {16, 6144, 4096}, {1, 1024, 1024}}
	if small() {
		shapes = [][3]int{{3, 72, 32}, {17, 16, 64}}
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("M%d_N%d_K%d", s[0], s[1], s[2]), func(t *testing.T) {
			compareKernel(t, g, func(k *kctx) {
				m, n, kk := s[0], s[1], s[2]
				const skip = 3 // output rows before the call's (decode rows in the backend)
				ldx := kk + 8
				x, _ := k.f32(m*ldx, 1)
				w := k.bf16(n*kk, 1/float32(math.Sqrt(float64(kk))))
				// the cast's bf16 output compared exactly, two values per 4-byte element
				xb := k.out("cast_bf16", (m*kk+1)/2, true, 0)
				k.launch(dev.KCastBF16, dev.D1(m), dev.D1(256), dev.Pack(&dev.CastArgs{Out: xb, X: x, Rows: int32(m), K: int32(kk), Ldx: int32(ldx)}))
				out := k.out("matmul", (skip+m)*n, false, tolLt)
				acc, _ := k.f32((skip+m)*n, 1)
				k.inout("matmul accumulate", acc, (skip+m)*n, tolLt)
				for _, c := range []struct {
					p   dev.Ptr
					acc bool
				}{{out, false}, {acc, true}} {
					if err := k.d.Matmul(dev.MatmulArgs{Out: c.p + dev.Ptr(4*skip*n), X: xb, W: w, M: m, N: n, K: kk, Ldx: kk, Ldo: n, Accumulate: c.acc}); err != nil {
						k.t.Fatal(err)
					}
				}
			})
		})
	}
}

// kernelLtShape compares the library with gemm_bf16 on the GPU at one model shape and checks
// that rows do not depend on the call's row count.
func kernelLtShape(t *testing.T, g dev.Device, m, n, k int) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	x := make([]float32, m*k)
	for i := range x {
		x[i] = 2*rng.Float32() - 1
	}
	alloc := func(bytes int) dev.Ptr {
		p, err := g.Alloc(int64(bytes))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Free(p) })
		return p
	}
	xp, xb, w := alloc(4*m*k), alloc(2*m*k), alloc(2*n*k)
	ref, got, part := alloc(4*m*n), alloc(4*m*n), alloc(4*m*n)
	if err := g.Upload(xp, f32Bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(dev.KFillBF16, dev.D1((n*k+1023)/1024), dev.D1(256), 0, dev.Pack(&dev.FillArgs{Out: w, N: uint64(n * k), Seed: 7, Scale: 1 / float32(math.Sqrt(float64(k)))})); err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(dev.KCastBF16, dev.D1(m), dev.D1(256), 0, dev.Pack(&dev.CastArgs{Out: xb, X: xp, Rows: int32(m), K: int32(k), Ldx: int32(k)})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []dev.Ptr{ref, got, part} {
		if err := g.Memset(p, 0xFF, int64(4*m*n)); err != nil {
			t.Fatal(err)
		}
	}
	builtin := func() error {
		return g.Launch(dev.KGemm, dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}, dev.D1(256), 0,
			dev.Pack(&dev.GemmArgs{Out: ref, X: xp, W: w, M: int32(m), N: int32(n), K: int32(k), Ldx: int32(k), Ldo: int32(n)}))
	}
	lt := func() error { return g.Matmul(dev.MatmulArgs{Out: got, X: xb, W: w, M: m, N: n, K: k, Ldx: k, Ldo: n}) }
	// the first call makes the plan: time the second
	for _, f := range []func() error{builtin, lt} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := g.Elapsed(builtin)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := g.Elapsed(lt)
	if err != nil {
		t.Fatal(err)
	}
	tflops := func(ms float32) float64 { return 2 * float64(m) * float64(n) * float64(k) / (float64(ms) * 1e9) }
	t.Logf("M=%d N=%d K=%d: built-in %.3f ms (%.0f TFLOP/s), cuBLASLt %.3f ms (%.0f TFLOP/s)", m, n, k, tb, tflops(tb), tl, tflops(tl))
	// rows alone and in groups of 7 at odd offsets, into a third buffer
	parts := [][2]int{{0, 1}, {5, 1}, {m - 1, 1}, {1, 7}, {m/2 + 1, 7}}
	for _, c := range parts {
		if err := g.Matmul(dev.MatmulArgs{Out: part + dev.Ptr(4*c[0]*n), X: xb + dev.Ptr(2*c[0]*k), W: w, M: c[1], N: n, K: k, Ldx: k, Ldo: n}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p dev.Ptr) []float32 {
		b := make([]byte, 4*m*n)
		if err := g.Download(b, p); err != nil {
			t.Fatal(err)
		}
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), m*n)
	}
	rf, gf, pf := read(ref), read(got), read(part)
	var num, den float64
	for i := range rf {
		if math.IsNaN(float64(gf[i])) || math.IsNaN(float64(rf[i])) {
			t.Fatalf("element %d: cuBLASLt %v, built-in %v", i, gf[i], rf[i])
		}
		d := float64(gf[i] - rf[i])
		num, den = num+d*d, den+float64(rf[i])*float64(rf[i])
	}
	rel := math.Sqrt(num / max(den, 1e-30))
	t.Logf("cuBLASLt vs built-in: relative error %.3g (tolerance %.0g)", rel, tolLt)
	if !(rel <= tolLt) {
		t.Errorf("cuBLASLt vs built-in: relative error %.3g over %.0g", rel, tolLt)
	}
	for _, c := range parts {
		lo, hi := c[0]*n, (c[0]+c[1])*n
		if !slices.Equal(pf[lo:hi], gf[lo:hi]) {
			t.Errorf("rows [%d,%d) computed in a call of %d rows differ from the same rows in a call of %d (batch invariance)", c[0], c[0]+c[1], c[1], m)
		}
	}
}
