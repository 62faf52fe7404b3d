package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
)

func TestParseKVDType(t *testing.T) {
	for in, want := range map[string]backend.KVDType{"auto": backend.KVAuto, "": backend.KVAuto, "BF16": backend.KVBF16, "f16": backend.KVF16, "f32": backend.KVF32, "float32": backend.KVF32} {
		got, err := backend.ParseKVDType(in)
		if err != nil || got != want {
			t.Errorf("backend.ParseKVDType(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := backend.ParseKVDType("q8_0"); err == nil {
		t.Error("q8_0 accepted as a KV cache type")
	}
}

// TestKVCacheDTypes runs the float32 qwen3 fixture with each KV cache type against the
// transformers reference. The bounds are what rounding keys and values to 16 bits costs: bf16
// keeps 8 significant bits, f16 11, so f16 lands near float32 and bf16 an order looser; auto
// follows the weights.
func TestKVCacheDTypes(t *testing.T) {
	ref := loadReference(t, "qwen3")
	m := loadFixture(t, "qwen3", "config.json")
	for _, tc := range []struct {
		typ, want backend.KVDType
		tol       float64
	}{{backend.KVAuto, backend.KVF32, fp32Tol}, {backend.KVF32, backend.KVF32, fp32Tol}, {backend.KVF16, backend.KVF16, 2e-3}, {backend.KVBF16, backend.KVBF16, 2e-2}} {
		b := newTestBackend(t, m, backend.Options{NumBlocks: 64, KVCacheDType: tc.typ})
		if b.KVCacheDType() != tc.want {
			t.Fatalf("%v resolved to %v, want %v", tc.typ, b.KVCacheDType(), tc.want)
		}
		pool := newBlockPool(b.NumBlocks(), 5)
		var worst float64
		for p, prompt := range ref.Prompts {
			s := newSeqRun(prompt.InputIDs, 0, 1, 0)
			runSeqs(t, b, pool, []*seqRun{s})
			d := relDiff(t, s.Prefill, ref.Prompts[p].LastLogits)
			worst = max(worst, d)
		}
		if worst > tc.tol {
			t.Errorf("kv %v: last logits within %.3g of the reference, want <= %.3g", tc.want, worst, tc.tol)
		}
		if testing.Verbose() {
			t.Logf("kv %v: worst last-logit difference %.3g", tc.want, worst)
		}
	}
	bf := loadFixture(t, "qwen3-bf16", "config.json")
	b := newTestBackend(t, bf, backend.Options{NumBlocks: 4})
	if b.KVCacheDType() != backend.KVBF16 {
		t.Errorf("auto KV cache for bf16 weights is %v, want bf16", b.KVCacheDType())
	}
	// A byte budget buys twice the blocks with a 16-bit cache.
	b32 := newTestBackend(t, bf, backend.Options{KVCacheBytes: 1 << 20, KVCacheDType: backend.KVF32})
	b16 := newTestBackend(t, bf, backend.Options{KVCacheBytes: 1 << 20})
	if b16.NumBlocks() != 2*b32.NumBlocks() {
		t.Errorf("1 MiB holds %d blocks at bf16, %d at f32; want twice as many", b16.NumBlocks(), b32.NumBlocks())
	}
}

// TestKVCacheRoundTrip checks that stored values come back rounded to nearest even in the cache
// type and widened exactly.
func TestKVCacheRoundTrip(t *testing.T) {
	vals := []float32{1, -2.5, 0.1, 3.14159, 1e-3, -65504, 1 + 1.0/256, 70000}
	for _, typ := range []backend.KVDType{backend.KVF32, backend.KVBF16, backend.KVF16} {
		c := newKVCache(typ, 1, 32)
		c.store(0, 8, vals, vals, haveSIMD)
		buf := make([]float32, len(vals))
		k := c.keys(0, 8, len(vals), buf)
		v := c.values(0, 8, len(vals), make([]float32, len(vals)))
		for i, x := range vals {
			want := x
			switch typ {
			case backend.KVBF16:
				want = math.Float32frombits(uint32(model.Float32ToBF16(x)) << 16)
			case backend.KVF16:
				want = model.HalfToFloat32(model.Float32ToHalf(x))
			}
			if k[i] != want || v[i] != want {
				t.Errorf("%v: stored %v, read back %v / %v, want %v", typ, x, k[i], v[i], want)
			}
		}
	}
}

// TestToHalfSIMD checks that the AVX2 rounding to half floats gives model.Float32ToHalf's bits
// everywhere: ties, overflow, subnormals, zeros, infinities, and NaNs (which fall back to Go).
func TestToHalfSIMD(t *testing.T) {
	if !haveSIMD {
		t.Skip("no SIMD kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	src := make([]float32, 1<<16)
	for i := range src {
		switch i % 4 {
		case 0: // every half float's neighbourhood, ties included
			h := model.HalfToFloat32(uint16(i >> 2))
			src[i] = math.Float32frombits(math.Float32bits(h) + uint32(rng.IntN(1<<13)) - 1<<12)
		case 1:
			src[i] = math.Float32frombits(rng.Uint32())
		case 2:
			src[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(60)-40)))
		default:
			src[i] = model.HalfToFloat32(uint16(rng.Uint32())) // exact halves, NaNs among them
		}
	}
	for _, chunk := range []int{8, 128} {
		for o := 0; o+chunk <= len(src); o += chunk {
			got := make([]uint16, chunk)
			toHalf(src[o:o+chunk], got, true)
			for i, x := range src[o : o+chunk] {
				if want := model.Float32ToHalf(x); got[i] != want {
					t.Fatalf("toHalf(%v = %#x) = %#x, want %#x", x, math.Float32bits(x), got[i], want)
				}
			}
		}
	}
}
