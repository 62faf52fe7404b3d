package emu

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

func bf16bytes(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		u := ToBF16(v)
		b[2*i], b[2*i+1] = byte(u), byte(u>>8)
	}
	return b
}

// cast_bf16 then the library GEMM computes what gemm_bf16 computes from the f32 activations
// (the same rounding of X, f32 products and sums): on strided rows, into a strided output that
// starts rows into its buffer, plain and accumulating, and replayed from a captured graph.
func TestMatmulMatchesTiledGemm(t *testing.T) {
	d := New(1 << 30)
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k, ldx, ldo, skip = 5, 24, 40, 48, 28, 3
	rnd := func(c int) []float32 {
		x := make([]float32, c)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		return x
	}
	x := mustAlloc(t, d, f32bytes(rnd((skip+m)*ldx)))
	w := mustAlloc(t, d, bf16bytes(rnd(n*k)))
	init := f32bytes(rnd((skip + m) * ldo))
	xb, _ := d.Alloc(int64(2 * m * k))
	for _, acc := range []bool{false, true} {
		ref := mustAlloc(t, d, init)
		got := mustAlloc(t, d, init)
		a := dev.GemmArgs{Out: ref + skip*ldo*4, X: x + skip*ldx*4, W: w, M: m, N: n, K: k, Ldx: ldx, Ldo: ldo}
		if acc {
			a.Accumulate = 1
		}
		if err := d.Launch(dev.KGemm, dev.Dim3{1, 1, 1}, dev.D1(256), 0, dev.Pack(&a)); err != nil {
			t.Fatal(err)
		}
		if err := d.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := d.Launch(dev.KCastBF16, dev.D1(m), dev.D1(256), 0, dev.Pack(&dev.CastArgs{Out: xb, X: x + skip*ldx*4, Rows: m, K: k, Ldx: ldx})); err != nil {
			t.Fatal(err)
		}
		if err := d.Matmul(dev.MatmulArgs{Out: got + skip*ldo*4, X: xb, W: w, M: m, N: n, K: k, Ldx: k, Ldo: ldo, Accumulate: acc}); err != nil {
			t.Fatal(err)
		}
		g, err := d.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		if d.Matmuls != 0 && !acc {
			t.Fatal("a captured matmul ran at capture")
		}
		before := d.Matmuls
		if err := d.LaunchGraph(g); err != nil {
			t.Fatal(err)
		}
		if d.Matmuls != before+1 {
			t.Fatalf("graph replay ran %d matmuls, want 1", d.Matmuls-before)
		}
		want := download(t, d, ref, (skip+m)*ldo)
		have := download(t, d, got, (skip+m)*ldo)
		for i := range want {
			if want[i] != have[i] {
				t.Fatalf("accumulate %v: element %d: matmul %v, gemm %v", acc, i, have[i], want[i])
			}
		}
	}
}

func TestMatmulRefusals(t *testing.T) {
	d := New(1 << 30)
	buf, _ := d.Alloc(1 << 16)
	ok := dev.MatmulArgs{Out: buf, X: buf + 4096, W: buf + 8192, M: 2, N: 8, K: 8, Ldx: 8, Ldo: 8}
	if err := d.Matmul(ok); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		mod  func(a *dev.MatmulArgs)
		want string
	}{
		"misaligned output": {func(a *dev.MatmulArgs) { a.Out += 4 }, "aligned"},
		"odd K":             {func(a *dev.MatmulArgs) { a.K, a.Ldx = 6, 6 }, "multiples"},
		"short stride":      {func(a *dev.MatmulArgs) { a.Ldo = 4 }, "below"},
		"out of bounds":     {func(a *dev.MatmulArgs) { a.M = 4000 }, "illegal address"},
	} {
		a := ok
		c.mod(&a)
		if err := d.Matmul(a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	if _, err := d.MatmulLib(); err != nil {
		t.Fatal(err)
	}
	d.NoMatmul()
	if _, err := d.MatmulLib(); err == nil {
		t.Fatal("NoMatmul device reports a library GEMM")
	}
	if err := d.Matmul(ok); err == nil {
		t.Fatal("NoMatmul device ran a matmul")
	}
}
