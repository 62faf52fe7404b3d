package quant

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The fixtures in testdata/ come from llama.cpp's own ggml library (libggml-base.so of the npm
// package @node-llama-cpp/linux-x64 3.22.1) through testdata/gen/genfixtures.c: its quantizer's
// bytes and its dequantizer's floats for the same inputs.
const fixtureRows, fixtureCols = 24, 512

func readFloats(t *testing.T, name string) []float32 {
	t.Helper()
	b := readFixture(t, name)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var fixtureTypes = []Type{F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K}

// TestQuantizeMatchesLlamaCpp: our quantizer writes llama.cpp's bytes for every fixture row.
func TestQuantizeMatchesLlamaCpp(t *testing.T) {
	in := readFloats(t, "input.f32")
	if len(in) != fixtureRows*fixtureCols {
		t.Fatalf("input.f32 has %d values", len(in))
	}
	for _, typ := range fixtureTypes {
		t.Run(typ.String(), func(t *testing.T) {
			want := readFixture(t, typ.String()+".q")
			got, err := Quantize(typ, in, fixtureCols)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d bytes, llama.cpp wrote %d", len(got), len(want))
			}
			rb, _ := typ.RowBytes(fixtureCols)
			bb := typ.BlockBytes()
			for r := range fixtureRows {
				g, w := got[r*rb:(r+1)*rb], want[r*rb:(r+1)*rb]
				if !bytes.Equal(g, w) {
					for b := 0; b < rb; b += bb {
						if !bytes.Equal(g[b:b+bb], w[b:b+bb]) {
							t.Errorf("row %d block %d:\n got %x\nwant %x", r, b/bb, g[b:b+bb], w[b:b+bb])
							break
						}
					}
				}
			}
		})
	}
}

// TestDequantizeMatchesLlamaCpp: our dequantizer gives llama.cpp's floats bit for bit, both on its
// quantizer's output and on random blocks (every quant bit pattern, random finite scales).
func TestDequantizeMatchesLlamaCpp(t *testing.T) {
	for _, typ := range fixtureTypes {
		for _, name := range []string{".q", ".rand"} {
			if name == ".rand" && !typ.Quantized() {
				continue
			}
			t.Run(typ.String()+name, func(t *testing.T) {
				src := readFixture(t, typ.String()+name)
				want := readFloats(t, strings.TrimSuffix(typ.String()+name, ".q")+".deq")
				got := make([]float32, len(want))
				if err := Dequantize(typ, src, got); err != nil {
					t.Fatal(err)
				}
				bad := 0
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						if bad++; bad <= 5 {
							t.Errorf("element %d: got %g (%08x), llama.cpp %g (%08x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d elements differ", bad, len(got))
				}
			})
		}
	}
}

// TestConversionsExhaustive: every float32 bit pattern rounds to the f16 and bf16 bits that ggml's
// conversions give, and every f16 widens to ggml's float32, compared by FNV-1a hashes of the
// whole tables that the fixture generator computed with ggml.
func TestConversionsExhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("2^32 conversions")
	}
	want := map[string]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(string(readFixture(t, "convert.txt"))), "\n") {
		name, hex, _ := strings.Cut(line, " ")
		v, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = v
	}
	const offset, prime = 0xcbf29ce484222325, 0x100000001b3
	h16, hbf := uint64(offset), uint64(offset)
	for u := uint64(0); u < 1<<32; u++ {
		f := math.Float32frombits(uint32(u))
		a, b := ToF16(f), ToBF16(f)
		h16 = ((h16^uint64(a&0xff))*prime ^ uint64(a>>8)) * prime
		hbf = ((hbf^uint64(b&0xff))*prime ^ uint64(b>>8)) * prime
	}
	hback := uint64(offset)
	for u := range 1 << 16 {
		bits := math.Float32bits(FromF16(uint16(u)))
		for k := range 4 {
			hback = (hback ^ uint64(bits>>(8*k)&0xff)) * prime
		}
	}
	for name, got := range map[string]uint64{"fp32_to_fp16": h16, "fp32_to_bf16": hbf, "fp16_to_fp32": hback} {
		if got != want[name] {
			t.Errorf("%s: hash %016x, ggml %016x", name, got, want[name])
		}
	}
}

// TestConversionsKnown: hand-checked values, including the rounding ties and the edges.
func TestConversionsKnown(t *testing.T) {
	for _, c := range []struct {
		f   float32
		f16 uint16
		bf  uint16
	}{
		{0, 0, 0},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{65504, 0x7bff, 0x4780},
		{65520, 0x7c00, 0x4780},                            // ties to even rounds up to infinity in f16
		{math.Float32frombits(0x3f801000), 0x3c00, 0x3f80}, // f16 tie, even stays
		{math.Float32frombits(0x3f803000), 0x3c02, 0x3f80}, // f16 tie, odd rounds up
		{math.Float32frombits(0x3f808000), 0x3c04, 0x3f80}, // bf16 tie, even stays
		{math.Float32frombits(0x3f818000), 0x3c0c, 0x3f82}, // bf16 tie, odd rounds up
		{5.960464477539063e-08, 0x0001, 0x3380},            // smallest f16 subnormal
		{2.98e-08, 0x0000, 0x3300},                         // below half of it
		{float32(math.Inf(1)), 0x7c00, 0x7f80},
		{float32(math.NaN()), 0x7e00, 0x7fc0},
	} {
		if got := ToF16(c.f); got != c.f16 {
			t.Errorf("ToF16(%g) = %04x, want %04x", c.f, got, c.f16)
		}
		if got := ToBF16(c.f); got != c.bf {
			t.Errorf("ToBF16(%g) = %04x, want %04x", c.f, got, c.bf)
		}
	}
	for h := range 1 << 16 {
		f := FromF16(uint16(h))
		if f == f && ToF16(f) != uint16(h) {
			t.Fatalf("f16 %04x -> %g -> %04x", h, f, ToF16(f))
		}
	}
}

// TestQuantizeRoundTrip: dequantized weights are within each format's step of the input, and
// quantizing the dequantized weights of Q8_0 / Q4_0 again gives the same bytes.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 8, 1024
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64()) * 0.05
	}
	for _, c := range []struct {
		typ Type
		// rel is the largest error allowed, relative to the largest magnitude of its block.
		rel float64
	}{{Q8_0, 0.6 / 127}, {Q4_0, 1.1 / 8}, {Q4_K, 0.12}, {Q6_K, 0.03}, {F16, 1e-3}, {BF16, 4e-3}} {
		t.Run(c.typ.String(), func(t *testing.T) {
			q, err := Quantize(c.typ, x, cols)
			if err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(x))
			if err := Dequantize(c.typ, q, y); err != nil {
				t.Fatal(err)
			}
			bs := max(c.typ.BlockSize(), 32)
			for b := 0; b < len(x); b += bs {
				var amax float64
				for _, v := range x[b : b+bs] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for i := b; i < b+bs; i++ {
					if e := math.Abs(float64(y[i] - x[i])); e > c.rel*amax {
						t.Fatalf("element %d: %g -> %g, error %.3g > %.3g", i, x[i], y[i], e, c.rel*amax)
					}
				}
			}
			if c.typ == Q8_0 || c.typ == Q4_0 {
				q2, err := Quantize(c.typ, y, cols)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(q, q2) {
					t.Errorf("requantizing the dequantized weights changed the bytes")
				}
			}
		})
	}
}

func TestQuantizeErrors(t *testing.T) {
	for _, c := range []struct {
		typ  Type
		n    int
		cols int
		bad  float32
		want string
	}{
		{Q8_0, 64, 48, 0, "multiple of 32"},
		{Q4_K, 512, 128, 0, "multiple of 256"},
		{Q8_0, 96, 64, 0, "not whole rows"},
		{Q8_0, 64, 32, float32(math.NaN()), "row 1"},
		{Q6_K, 256, 256, float32(math.Inf(-1)), "-Inf"},
		{Type(99), 32, 32, 0, "ggml_type(99)"},
	} {
		x := make([]float32, c.n)
		if c.bad != 0 || c.bad != c.bad {
			x[40] = c.bad
		}
		_, err := Quantize(c.typ, x, c.cols)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Quantize(%s, %d values, cols %d): error %v, want one containing %q", c.typ, c.n, c.cols, err, c.want)
		}
	}
	if err := Dequantize(Q8_0, make([]byte, 33), make([]float32, 32)); err == nil || !strings.Contains(err.Error(), "take 34 bytes, have 33") {
		t.Errorf("short source: %v", err)
	}
	if err := Dequantize(Q4_K, make([]byte, 144), make([]float32, 255)); err == nil {
		t.Errorf("partial block accepted")
	}
}

// FuzzDequantize: any bytes decode without panicking, and equal blocks decode equally wherever
// they sit in the row.
func FuzzDequantize(f *testing.F) {
	f.Add(uint8(0), []byte{1, 2, 3})
	f.Add(uint8(4), bytes.Repeat([]byte{0xff}, 300))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		typ := fixtureTypes[int(which)%len(fixtureTypes)]
		bb := typ.BlockBytes()
		nb := len(data) / bb
		if nb == 0 {
			return
		}
		n := nb * typ.BlockSize()
		out := make([]float32, n)
		if err := Dequantize(typ, data[:nb*bb], out); err != nil {
			t.Fatal(err)
		}
		one := make([]float32, typ.BlockSize())
		if err := Dequantize(typ, data[(nb-1)*bb:nb*bb], one); err != nil {
			t.Fatal(err)
		}
		for i, v := range one {
			if w := out[n-len(one)+i]; math.Float32bits(v) != math.Float32bits(w) {
				t.Fatalf("%s last block element %d: alone %g, in the row %g", typ, i, v, w)
			}
		}
	})
}

func ExampleQuantize() {
	x := make([]float32, 32)
	for i := range x {
		x[i] = float32(8*i - 127) // the largest magnitude is 127, so the scale is exactly 1
	}
	q, _ := Quantize(Q8_0, x, 32)
	y := make([]float32, 32)
	_ = Dequantize(Q8_0, q, y)
	fmt.Println(len(q), y[0], y[31])
	// Output: 34 -127 121
}

// TestQuantizeSplitIndependent: quantizing rows in parallel chunks gives the bytes of quantizing
// each row alone.
func TestQuantizeSplitIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const rows, cols = 300, 512 // more rows than one parallel chunk holds
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, typ := range []Type{Q8_0, Q4_K} {
		all, err := Quantize(typ, x, cols)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := typ.RowBytes(cols)
		for _, r := range []int{0, 127, 128, 299} {
			one, _ := Quantize(typ, x[r*cols:(r+1)*cols], cols)
			if !bytes.Equal(one, all[r*rb:(r+1)*rb]) {
				t.Errorf("%s row %d differs when quantized with the others", typ, r)
			}
		}
	}
}
