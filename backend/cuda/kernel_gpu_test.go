package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/backend/cuda/internal/emu"
	"github.com/llmserve/llmserve/quant"
)

// RequireGPUEnv, set to 1 (scripts/gpu/check.sh does on a machine with a GPU), makes a GPU test
// or benchmark that cannot open GPU 0 with the kernels fail instead of skipping, so a missing
// fatbin, driver or device never reads as a pass in the script's summary.
const RequireGPUEnv = "LLMSERVE_CUDA_REQUIRE_GPU"

var requireGPU = os.Getenv(RequireGPUEnv) == "1"

// noGPU skips t saying why there is no GPU (the loader's error without a driver, the MANIFEST's
// without a fatbin), or fails it under RequireGPUEnv.
func noGPU(t testing.TB, err error) {
	t.Helper()
	if requireGPU {
		t.Fatalf("no CUDA device, and %s=1: %v", RequireGPUEnv, err)
	}
	t.Skipf("no CUDA device: %v", err)
}

// probeGPU skips or fails t (see noGPU) unless GPU 0 opens with the kernels; the device it
// opened is closed again (a context left open holds its memory for the process's life).
func probeGPU(t testing.TB) {
	t.Helper()
	d, err := openDriver(0)
	if err != nil {
		noGPU(t, err)
		return
	}
	_ = d.Close()
}

// gpuOrSkip opens GPU 0 with the kernels, or skips with the reason (see noGPU).
func gpuOrSkip(t testing.TB) *driverDevice {
	t.Helper()
	d, err := openDriver(0)
	if err != nil {
		noGPU(t, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// smallSizes is LLMSERVE_CUDA_SMALL=1 (compute-sanitizer's runs) or the emulator's own run of
// the scenarios: small shapes.
var smallSizes = os.Getenv("LLMSERVE_CUDA_SMALL") == "1"

func small() bool { return smallSizes }

// kctx builds one kernel scenario's buffers on one device; the scenario runs on the GPU and on
// the emulator from the same seed, so both see the same inputs.
type kctx struct {
	t   testing.TB
	d   dev.Device
	rng *rand.Rand
	// outs are the buffers compared afterwards, in creation order.
	outs []kout
}

type kout struct {
	name string
	p    dev.Ptr
	n    int
	ints bool
	tol  float64
}

func (k *kctx) alloc(b []byte) dev.Ptr {
	p, err := k.d.Alloc(int64(max(len(b), 4)))
	if err != nil {
		k.t.Fatal(err)
	}
	if err := k.d.Upload(p, b); err != nil {
		k.t.Fatal(err)
	}
	return p
}

// f32 is a buffer of n floats uniform in [-scale, scale].
func (k *kctx) f32(n int, scale float32) (dev.Ptr, []float32) {
	x := make([]float32, n)
	for i := range x {
		x[i] = scale * (2*k.rng.Float32() - 1)
	}
	return k.alloc(f32Bytes(x)), x
}

// bf16 is a buffer of n bf16 values uniform in [-scale, scale].
func (k *kctx) bf16(n int, scale float32) dev.Ptr {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], toBF16(scale*(2*k.rng.Float32()-1)))
	}
	return k.alloc(b)
}

func (k *kctx) i32(x []int32) dev.Ptr { return k.alloc(i32Bytes(x)) }

// out is an output buffer of n 4-byte elements poisoned with NaN (0xFF bytes) before launch.
func (k *kctx) out(name string, n int, ints bool, tol float64) dev.Ptr {
	p, err := k.d.Alloc(int64(4 * n))
	if err != nil {
		k.t.Fatal(err)
	}
	if err := k.d.Memset(p, 0xFF, int64(4*n)); err != nil {
		k.t.Fatal(err)
	}
	k.outs = append(k.outs, kout{name, p, n, ints, tol})
	return p
}

// inout marks an input buffer as compared after the launch too (kernels that work in place).
func (k *kctx) inout(name string, p dev.Ptr, n int, tol float64) {
	k.outs = append(k.outs, kout{name, p, n, false, tol})
}

func (k *kctx) launch(kern dev.Kernel, grid, block dev.Dim3, args []byte) {
	if err := k.d.Launch(kern, grid, block, 0, args); err != nil {
		k.t.Fatalf("%s: %v", kern, err)
	}
}

func (k *kctx) read(o kout) []byte {
	b := make([]byte, 4*o.n)
	if err := k.d.Download(b, o.p); err != nil {
		k.t.Fatal(err)
	}
	return b
}

// compareKernel runs scenario on the GPU and the emulator and compares every output:
// ||gpu - ref|| / ||ref|| within its tolerance, NaN never passing, integer outputs equal.
func compareKernel(t *testing.T, g dev.Device, scenario func(k *kctx)) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	run := func(d dev.Device) *kctx {
		k := &kctx{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 5))}
		scenario(k)
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		return k
	}
	gk := run(g)
	ek := run(emu.New(16 << 30))
	for i, o := range gk.outs {
		gb, eb := gk.read(o), ek.read(ek.outs[i])
		if o.ints {
			for j := 0; j < o.n; j++ {
				if gv, ev := int32(binary.LittleEndian.Uint32(gb[4*j:])), int32(binary.LittleEndian.Uint32(eb[4*j:])); gv != ev {
					t.Errorf("%s[%d] = %d, reference %d", o.name, j, gv, ev)
					break
				}
			}
			continue
		}
		gf := unsafe.Slice((*float32)(unsafe.Pointer(&gb[0])), o.n)
		ef := unsafe.Slice((*float32)(unsafe.Pointer(&eb[0])), o.n)
		var num, den float64
		for j := range gf {
			if math.IsNaN(float64(gf[j])) != math.IsNaN(float64(ef[j])) {
				t.Errorf("%s[%d] = %v, reference %v", o.name, j, gf[j], ef[j])
				return
			}
			if math.IsNaN(float64(ef[j])) || math.IsInf(float64(ef[j]), 0) {
				continue
			}
			d := float64(gf[j] - ef[j])
			num += d * d
			den += float64(ef[j]) * float64(ef[j])
		}
		rel := math.Sqrt(num / max(den, 1e-30))
		t.Logf("%s: relative error %.3g (tolerance %.0g)", o.name, rel, o.tol)
		if !(rel <= o.tol) {
			t.Errorf("%s: relative error %.3g over %.0g", o.name, rel, o.tol)
		}
	}
}

// Tolerances: float32 arithmetic in a different order or with the approximate exponential;
// bf16 when the kernel rounds operands to bf16 (a summation-order difference can flip one).
const (
	tolF32  = 1e-5
	tolExp  = 1e-4
	tolBF16 = 1e-2
)

func TestKernelElementwise(t *testing.T) { kernelElementwise(t, gpuOrSkip(t)) }

func kernelElementwise(t *testing.T, g dev.Device) {
	rows, h, inter, v := 64, 4096, 12288, 1000
	if small() {
		rows, h, inter = 3, 100, 70
	}
	compareKernel(t, g, func(k *kctx) {
		ids := make([]int32, rows)
		for i := range ids {
			ids[i] = int32(k.rng.IntN(v))
		}
		table := k.bf16(v*h, 1)
		out := k.out("embed_gather", rows*h, false, 0)
		k.launch(dev.KEmbed, dev.D1(rows), dev.D1(256), dev.Pack(&dev.EmbedArgs{Out: out, Table: table, IDs: k.i32(ids), Rows: int32(rows), H: int32(h)}))
		table32, _ := k.f32(v*h, 1)
		out32 := k.out("embed_gather f32", rows*h, false, 0)
		k.launch(dev.KEmbed, dev.D1(rows), dev.D1(256), dev.Pack(&dev.EmbedArgs{Out: out32, Table: table32, IDs: k.i32(ids), Rows: int32(rows), H: int32(h), TableF32: 1}))
		x, _ := k.f32(rows*h, 3)
		w, _ := k.f32(h, 1)
		idx := make([]int32, rows/2+1)
		for i := range idx {
			idx[i] = int32(k.rng.IntN(rows))
		}
		n1 := k.out("rmsnorm", rows*h, false, tolF32)
		k.launch(dev.KRMSNorm, dev.D1(rows), dev.D1(256), dev.Pack(&dev.RMSNormArgs{Out: n1, X: x, W: w, Rows: int32(rows), H: int32(h), Eps: 1e-6}))
		n2 := k.out("rmsnorm rows", len(idx)*h, false, tolF32)
		k.launch(dev.KRMSNorm, dev.D1(len(idx)), dev.D1(256), dev.Pack(&dev.RMSNormArgs{Out: n2, X: x, W: w, RowIdx: k.i32(idx), Rows: int32(len(idx)), H: int32(h), Eps: 1e-6}))
		gu, _ := k.f32(rows*2*inter, 4)
		k.launch(dev.KSwiGLU, dev.D1(rows), dev.D1(256), dev.Pack(&dev.SwiGLUArgs{GU: gu, Rows: int32(rows), Inter: int32(inter)}))
		k.inout("swiglu", gu, rows*2*inter, tolExp)
		y, _ := k.f32(rows*h, 1)
		bias, _ := k.f32(h, 1)
		k.launch(dev.KResidualAdd, dev.D1(rows), dev.D1(256), dev.Pack(&dev.ResidualAddArgs{X: y, B: bias, Rows: int32(rows), N: int32(h), Ld: int32(h)}))
		k.inout("residual_add", y, rows*h, tolF32)
		fill := k.out("fill_bf16", (h*3+1)/2, true, 0)
		k.launch(dev.KFillBF16, dev.D1((h*3+1023)/1024), dev.D1(256), dev.Pack(&dev.FillArgs{Out: fill, N: uint64(h * 3), Seed: 9, Scale: 0.5}))
	})
}

func TestKernelGemm(t *testing.T) { kernelGemm(t, gpuOrSkip(t)) }

func kernelGemm(t *testing.T, g dev.Device) {
	shapes := [][3]int{{1, 1024, 1024}, {7, 3072, 1024}, {130, 1000, 520}, {64, 4096, 4096}}
	if small() {
		shapes = [][3]int{{3, 70, 33}, {65, 65, 17}}
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("M%d_N%d_K%d", s[0], s[1], s[2]), func(t *testing.T) {
			compareKernel(t, g, func(k *kctx) {
				m, n, kk := s[0], s[1], s[2]
				x, _ := k.f32(m*kk, 1)
				w := k.bf16(n*kk, 1/float32(math.Sqrt(float64(kk))))
				out := k.out("gemm", m*n, false, tolBF16)
				k.launch(dev.KGemm, dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}, dev.D1(256),
					dev.Pack(&dev.GemmArgs{Out: out, X: x, W: w, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(kk), Ldo: int32(n)}))
				acc, _ := k.f32(m*n, 1)
				k.launch(dev.KGemm, dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}, dev.D1(256),
					dev.Pack(&dev.GemmArgs{Out: acc, X: x, W: w, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(kk), Ldo: int32(n), Accumulate: 1}))
				k.inout("gemm accumulate", acc, m*n, tolBF16)
				w32, _ := k.f32(n*kk, 1/float32(math.Sqrt(float64(kk))))
				out32 := k.out("gemm f32 weights", m*n, false, tolF32)
				k.launch(dev.KGemm, dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}, dev.D1(256),
					dev.Pack(&dev.GemmArgs{Out: out32, X: x, W: w32, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(kk), Ldo: int32(n), WF32: 1}))
			})
		})
	}
}

// quantized is a random [n][k] matrix quantized to qt by quant's reference quantizer, on the
// device.
func (k *kctx) quantized(qt quant.Type, n, kk int) dev.Ptr {
	w := make([]float32, n*kk)
	for i := range w {
		w[i] = float32(k.rng.NormFloat64()) / float32(math.Sqrt(float64(kk)))
	}
	q, err := quant.Quantize(qt, w, kk)
	if err != nil {
		k.t.Fatal(err)
	}
	return k.alloc(q)
}

func TestKernelDecodeGemm(t *testing.T) { kernelDecodeGemm(t, gpuOrSkip(t)) }

// kernelDecodeGemm: gemv_bf16, gemv_q8_0 and gemv_q4_k at decode shapes (1 to 33 rows, 3 row groups at most, a padded
// activation stride), plain and accumulating; gemm_q and embed_q for both block types. The
// kernels round nothing the references do not (bf16 products of bf16-rounded activations are
// exact in f32; weights are dequantized with unfused multiplies), so only the GPU's fused
// multiply-adds differ: float32 tolerances, and the gathers exact.
func kernelDecodeGemm(t *testing.T, g dev.Device) {
	shapes := [][3]int{{1, 1024, 1024}, {4, 6144, 1024}, {16, 1024, 3072}, {33, 1536, 4096}, {1, 151936, 1024}}
	if small() {
		shapes = [][3]int{{1, 70, 256}, {17, 9, 512}}
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("M%d_N%d_K%d", s[0], s[1], s[2]), func(t *testing.T) {
			compareKernel(t, g, func(k *kctx) {
				m, n, kk := s[0], s[1], s[2]
				ldx := kk + 4
				x, _ := k.f32(m*ldx, 1)
				grid, blk := dev.GemvGrid(m, n), dev.D1(32*dev.GemvWarps)
				w := k.bf16(n*kk, 1/float32(math.Sqrt(float64(kk))))
				out := k.out("gemv_bf16", m*n, false, tolF32)
				k.launch(dev.KGemv, grid, blk, dev.Pack(&dev.GemvArgs{Out: out, X: x, W: w, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(ldx), Ldo: int32(n)}))
				acc, _ := k.f32(m*n, 1)
				k.launch(dev.KGemv, grid, blk, dev.Pack(&dev.GemvArgs{Out: acc, X: x, W: w, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(ldx), Ldo: int32(n), Accumulate: 1}))
				k.inout("gemv_bf16 accumulate", acc, m*n, tolF32)
				for _, q := range []struct {
					qt   quant.Type
					kern dev.Kernel
				}{{quant.Q8_0, dev.KGemvQ8_0}, {quant.Q4_K, dev.KGemvQ4_K}} {
					if n > 8192 {
						break // the vocabulary-sized shape is bf16's: quantizing 155M weights on the host takes tens of seconds
					}
					wq := k.quantized(q.qt, n, kk)
					o := k.out("gemv_"+q.qt.String(), m*n, false, tolF32)
					k.launch(q.kern, grid, blk, dev.Pack(&dev.GemvArgs{Out: o, X: x, W: wq, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(ldx), Ldo: int32(n)}))
					o2 := k.out("gemm_q "+q.qt.String(), m*n, false, tolF32)
					k.launch(dev.KGemmQ, dev.Dim3{uint32((n + 63) / 64), uint32((m + 63) / 64), 1}, dev.D1(256),
						dev.Pack(&dev.GemmQArgs{Out: o2, X: x, W: wq, M: int32(m), N: int32(n), K: int32(kk), Ldx: int32(ldx), Ldo: int32(n), QType: int32(q.qt)}))
					ids := make([]int32, m)
					for i := range ids {
						ids[i] = int32(k.rng.IntN(n))
					}
					e := k.out("embed_q "+q.qt.String(), m*kk, false, 0)
					k.launch(dev.KEmbedQ, dev.D1(m), dev.D1(256), dev.Pack(&dev.EmbedQArgs{Out: e, Table: wq, IDs: k.i32(ids), Rows: int32(m), H: int32(kk), QType: int32(q.qt)}))
				}
			})
		})
	}
}

// attnShape is a model's attention shape.
type attnShape struct{ nh, nkv, hd int }

func TestKernelAttention(t *testing.T) { kernelAttention(t, gpuOrSkip(t)) }

func kernelAttention(t *testing.T, g dev.Device) {
	// the first three: models' shapes (the vector decode path); head-64 and head-256 its other head
	// dims; wide-group a bf16 cache on the scalar path (group x head dim past the vector path's 1,024)
	shapes := map[string]attnShape{"qwen3-0.6b": {16, 8, 128}, "llama-8b": {32, 8, 128}, "qwen2-7b": {28, 4, 128},
		"head-64": {32, 4, 64}, "head-256": {8, 4, 256}, "wide-group": {16, 2, 256}}
	ctxs := []int{1, 17, 700, 1500}
	if small() {
		shapes = map[string]attnShape{"tiny": {4, 2, 64}}
		ctxs = []int{1, 20, 600}
	}
	for name, s := range shapes {
		t.Run(name, func(t *testing.T) {
			for _, f32 := range []bool{false, true} {
				t.Run(map[bool]string{false: "bf16 cache", true: "f32 cache"}[f32], func(t *testing.T) {
					compareKernel(t, g, func(k *kctx) { attentionScenario(k, s, ctxs, f32) })
				})
			}
		})
	}
}

// attentionScenario: one sequence per context length, each a decode row at its last position
// plus a prefill chunk of its last 20 positions (or fewer), all through qkv_post (so K/V go in
// through the block table) and then both attention kernels.
func attentionScenario(k *kctx, s attnShape, ctxs []int, f32 bool) {
	const bs = 16
	stride := 0
	for _, c := range ctxs {
		stride = max(stride, (c+bs-1)/bs)
	}
	blocks := len(ctxs)*stride + 1
	perm := k.rng.Perm(blocks - 1)
	var tables, pos, rowSeq, decode, tiles []int32
	rows := 0
	for si, c := range ctxs {
		for j := range stride {
			tables = append(tables, int32(perm[si*stride+j]))
		}
		chunk := min(c, 20)
		for p := c - chunk; p < c; p++ {
			pos = append(pos, int32(p))
			rowSeq = append(rowSeq, int32(si))
		}
		if chunk == 1 {
			decode = append(decode, int32(rows))
		} else {
			tiles = append(tiles, int32(rows), int32(min(chunk, tileRows)))
			if chunk > tileRows {
				tiles = append(tiles, int32(rows+tileRows), int32(chunk-tileRows))
			}
			decode = append(decode, int32(rows+chunk-1))
		}
		rows += chunk
	}
	stridex := (s.nh + 2*s.nkv) * s.hd
	half := s.hd / 2
	maxPos := 0
	for _, c := range ctxs {
		maxPos = max(maxPos, c)
	}
	cacheN := blocks * s.nkv * bs * s.hd
	var kcache, vcache dev.Ptr
	if f32 {
		kcache, _ = k.f32(cacheN, 1)
		vcache, _ = k.f32(cacheN, 1)
	} else {
		kcache, vcache = k.bf16(cacheN, 1), k.bf16(cacheN, 1)
	}
	kvf32 := flag(f32)
	cos, sin := make([]float32, maxPos*half), make([]float32, maxPos*half)
	for i := range cos {
		a := k.rng.Float64() * 2 * math.Pi
		cos[i], sin[i] = float32(math.Cos(a)), float32(math.Sin(a))
	}
	qkv, _ := k.f32(rows*stridex, 2)
	bias, _ := k.f32(stridex, 0.5)
	qn, _ := k.f32(s.hd, 1)
	kn, _ := k.f32(s.hd, 1)
	pp, rs, tb := k.i32(pos), k.i32(rowSeq), k.i32(tables)
	k.launch(dev.KQKVPost, dev.Dim3{uint32(rows), uint32(s.nh + 2*s.nkv), 1}, dev.D1(128), dev.Pack(&dev.QKVPostArgs{
		QKV: qkv, Bias: bias, QNorm: qn, KNorm: kn, RopeCos: k.alloc(f32Bytes(cos)), RopeSin: k.alloc(f32Bytes(sin)),
		KCache: kcache, VCache: vcache, Pos: pp, RowSeq: rs, Tables: tb, Rows: int32(rows), NumHeads: int32(s.nh),
		NumKVHeads: int32(s.nkv), HeadDim: int32(s.hd), BlockSize: bs, MaxBlocks: int32(stride), KVF32: kvf32, Eps: 1e-6}))
	k.inout("qkv_post q|k|v", qkv, rows*stridex, tolF32)
	if f32 {
		k.inout("qkv_post k cache", kcache, cacheN, tolF32)
	} else {
		k.inout("qkv_post k cache (bf16 pairs)", kcache, cacheN/2, tolBF16)
	}
	scale := float32(1 / math.Sqrt(float64(s.hd)))
	parts := (maxPos + dev.PartitionTokens - 1) / dev.PartitionTokens
	nd := len(decode)
	po := k.out("part_o", nd*s.nh*parts*s.hd, false, math.Inf(1)) // partitions a row lacks stay poisoned
	pm := k.out("part_m", nd*s.nh*parts, false, math.Inf(1))
	pl := k.out("part_l", nd*s.nh*parts, false, math.Inf(1))
	k.outs = k.outs[:len(k.outs)-3]
	dec := k.out("attn decode", rows*s.nh*s.hd, false, tolExp)
	dr := k.i32(decode)
	k.launch(dev.KAttnDecode, dev.Dim3{uint32(nd), uint32(s.nkv), uint32(parts)}, dev.D1(128), dev.Pack(&dev.AttnDecodeArgs{
		QKV: qkv, KCache: kcache, VCache: vcache, Tables: tb, RowSeq: rs, Pos: pp, Rows: dr, PartO: po, PartM: pm, PartL: pl,
		NumRows: int32(nd), NumHeads: int32(s.nh), NumKVHeads: int32(s.nkv), HeadDim: int32(s.hd), BlockSize: bs,
		MaxBlocks: int32(stride), MaxParts: int32(parts), KVF32: kvf32, Scale: scale}))
	k.launch(dev.KAttnMerge, dev.Dim3{uint32(nd), uint32(s.nh), 1}, dev.D1(128), dev.Pack(&dev.AttnMergeArgs{
		Out: dec, PartO: po, PartM: pm, PartL: pl, Rows: dr, Pos: pp, NumRows: int32(nd), NumHeads: int32(s.nh),
		HeadDim: int32(s.hd), MaxParts: int32(parts)}))
	// rows other than the decode rows stay poisoned in dec on both devices
	pre := k.out("attn prefill", rows*s.nh*s.hd, false, tolExp)
	k.launch(dev.KAttnPrefill, dev.Dim3{uint32(len(tiles) / 2), uint32(s.nh), 1}, dev.D1(128), dev.Pack(&dev.AttnPrefillArgs{
		Out: pre, QKV: qkv, KCache: kcache, VCache: vcache, Tables: tb, RowSeq: rs, Pos: pp, Tiles: k.i32(tiles),
		NumTiles: int32(len(tiles) / 2), NumHeads: int32(s.nh), NumKVHeads: int32(s.nkv), HeadDim: int32(s.hd),
		BlockSize: bs, MaxBlocks: int32(stride), KVF32: kvf32, Scale: scale}))
}

func TestKernelSampling(t *testing.T) { kernelSampling(t, gpuOrSkip(t)) }

func kernelSampling(t *testing.T, g dev.Device) {
	vocab := 151936
	if small() {
		vocab = 1000
	}
	compareKernel(t, g, func(k *kctx) {
		specs := []dev.SampleRow{
			{Temperature: 0, TopP: 1, RepPenalty: 1, TopLogprobs: 5},
			{Temperature: 0.8, TopP: 1, RepPenalty: 1.3, SeedLo: 7, Step: 3, TopLogprobs: 2},
			{Temperature: 1, TopP: 0.9, TopK: 40, MinP: 0.01, RepPenalty: 1, SeedLo: 11, SeedHi: 3, Step: 1},
			{Temperature: 0.7, TopP: 0.95, RepPenalty: 1, SeedLo: 99, Step: 8, MaskRow: 0},
			{Temperature: 0, TopP: 1, RepPenalty: 1, FreqPenalty: 0.5, PresPenalty: 0.3, MaskRow: 1, Forced: 0},
		}
		ints := []int32{5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 2, 2, 1}
		floats := []float32{3, -100, 2}
		for i := range specs {
			specs[i].LogitRow = int32(i)
			if specs[i].MaskRow == 0 && i != 3 {
				specs[i].MaskRow = -1
			}
			specs[i].BiasOff, specs[i].BiasLen, specs[i].BiasValOff = 0, 3, 0
			specs[i].SeenOff, specs[i].SeenLen = 3, 4
			specs[i].GenOff, specs[i].GenLen = 7, 3
			specs[i].BanOff, specs[i].BanLen = 12, 1
		}
		words := (vocab + 63) / 64
		masks := make([]uint64, 2*words)
		for i := range masks {
			masks[i] = k.rng.Uint64()
		}
		logits, _ := k.f32(len(specs)*vocab, 8)
		sp := k.alloc(unsafe.Slice((*byte)(unsafe.Pointer(&specs[0])), len(specs)*int(unsafe.Sizeof(dev.SampleRow{}))))
		ip, fp := k.i32(ints), k.alloc(f32Bytes(floats))
		mp := k.alloc(unsafe.Slice((*byte)(unsafe.Pointer(&masks[0])), 8*len(masks)))
		work := k.out("sample_prep work", len(specs)*vocab, false, tolF32)
		n := int32(len(specs))
		k.launch(dev.KSamplePrep, dev.D1(len(specs)), dev.D1(256), dev.Pack(&dev.SamplePrepArgs{
			Work: work, Logits: logits, Specs: sp, Ints: ip, Floats: fp, Masks: mp, Rows: n, Vocab: int32(vocab), MaskWords: int32(words)}))
		tok := k.out("tokens", len(specs), true, 0)
		lp := k.out("logprobs", len(specs), false, tolExp)
		tid := k.out("top ids", len(specs)*maxTopLogprobs, true, 0)
		tlp := k.out("top logprobs", len(specs)*maxTopLogprobs, false, tolExp)
		// rows asking for fewer than maxTopLogprobs leave the rest poisoned on both devices
		k.launch(dev.KSamplePick, dev.D1(len(specs)), dev.D1(256), dev.Pack(&dev.SamplePickArgs{
			Work: work, Logits: logits, Specs: sp, Ints: ip, Masks: mp, OutToken: tok, OutLogprob: lp, OutTopIDs: tid,
			OutTopLogprobs: tlp, Rows: n, Vocab: int32(vocab), MaskWords: int32(words), MaxTop: maxTopLogprobs}))
	})
}

// TestScenariosOnEmulator runs the GPU kernel scenarios (small shapes) with the emulator in the
// GPU's place: every launch they make is bounds-checked, so a scenario that reads or writes
// outside its buffers fails here, before a GPU run is spent on it.
func TestScenariosOnEmulator(t *testing.T) {
	old := smallSizes
	smallSizes = true
	defer func() { smallSizes = old }()
	e := emu.New(1 << 30)
	kernelElementwise(t, e)
	kernelGemm(t, e)
	kernelDecodeGemm(t, e)
	kernelLtReference(t, e)
	kernelLtShape(t, e, 40, 72, 64)
	kernelAttention(t, e)
	kernelSampling(t, e)
}

// TestRequireGPUFails: under RequireGPUEnv a GPU test that cannot open the device fails (the
// GPU script's summary must not count a skip as a pass). Runs this test binary again on a
// kernel test and a forDevices test, where no GPU opens.
func TestRequireGPUFails(t *testing.T) {
	if d, err := openDriver(0); err == nil {
		_ = d.Close()
		t.Skip("a GPU opens here")
	}
	for _, name := range []string{"TestKernelElementwise", "TestAllLogits", "TestHFRandom"} {
		cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.v")
		cmd.Env = append(os.Environ(), RequireGPUEnv+"=1", "LLMSERVE_CUDA_GPU_ONLY=1", "LLMSERVE_HF_REF="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), RequireGPUEnv+"=1") || !strings.Contains(string(out), "--- FAIL: "+name) {
			t.Errorf("%s under %s=1 without a GPU: exit %v, want a failure naming it:\n%s", name, RequireGPUEnv, err, out)
		}
	}
}
