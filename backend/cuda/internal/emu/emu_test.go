package emu

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func i32bytes(x []int32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func mustAlloc(t *testing.T, d *Device, src []byte) dev.Ptr {
	t.Helper()
	p, err := d.Alloc(int64(len(src)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(p, src); err != nil {
		t.Fatal(err)
	}
	return p
}

func download(t *testing.T, d *Device, p dev.Ptr, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.Download(b, p); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// An embedding id past the table's end is an illegal address, not a silent read of a neighbour.
func TestOutOfBoundsLaunchFails(t *testing.T) {
	d := New(1 << 30)
	const h = 8
	table := make([]byte, 4*h*2) // 4 rows of bf16
	tp := mustAlloc(t, d, table)
	ids := mustAlloc(t, d, i32bytes([]int32{1, 4}))
	out, _ := d.Alloc(2 * h * 4)
	args := dev.Pack(&dev.EmbedArgs{Out: out, Table: tp, IDs: ids, Rows: 2, H: h})
	err := d.Launch(dev.KEmbed, dev.D1(2), dev.D1(256), 0, args)
	if err == nil || !strings.Contains(err.Error(), "embed_gather: illegal address") {
		t.Fatalf("launch error %v, want an illegal address in embed_gather", err)
	}
	// a buffer of the wrong size for the struct is refused
	if err := d.Launch(dev.KEmbed, dev.D1(2), dev.D1(256), 0, args[:len(args)-4]); err == nil {
		t.Fatal("short argument buffer accepted")
	}
	// a grid that does not cover the rows is refused
	if err := d.Launch(dev.KEmbed, dev.D1(1), dev.D1(256), 0, args); err == nil {
		t.Fatal("grid smaller than the rows accepted")
	}
}

func TestFreshMemoryIsNaN(t *testing.T) {
	d := New(1 << 20)
	p, _ := d.Alloc(16)
	for _, v := range download(t, d, p, 4) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("fresh memory reads %v", v)
		}
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(p, []byte{1}); err == nil {
		t.Fatal("upload to freed memory succeeded")
	}
	if _, err := d.Alloc(2 << 20); err == nil {
		t.Fatal("allocation past the limit succeeded")
	}
}

// A captured graph replays its launches with the argument bytes of capture time, reading the
// buffers' contents at replay time.
func TestGraphReplay(t *testing.T) {
	d := New(1 << 20)
	x := mustAlloc(t, d, f32bytes([]float32{1, 2, 3}))
	b := mustAlloc(t, d, f32bytes([]float32{10, 20, 30}))
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	args := dev.Pack(&dev.ResidualAddArgs{X: x, B: b, Rows: 1, N: 3, Ld: 3, LdB: 0})
	if err := d.Launch(dev.KResidualAdd, dev.D1(1), dev.D1(256), 0, args); err != nil {
		t.Fatal(err)
	}
	g, err := d.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, x, 3); got[0] != 1 {
		t.Fatalf("capture ran the launch: %v", got)
	}
	if err := d.Upload(b, f32bytes([]float32{100, 200, 300})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.LaunchGraph(g); err != nil {
			t.Fatal(err)
		}
	}
	if got := download(t, d, x, 3); got[0] != 201 || got[2] != 603 {
		t.Fatalf("after two replays x = %v, want [201 402 603]", got)
	}
}

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {math.Float32frombits(0x3f808000), 0x3f80}, {math.Float32frombits(0x3f818000), 0x3f82}, {math.Float32frombits(0x3f808001), 0x3f81}} {
		if got := ToBF16(c.in); got != c.want {
			t.Errorf("ToBF16(%#x) = %#x, want %#x", math.Float32bits(c.in), got, c.want)
		}
	}
	if !math.IsNaN(float64(RoundBF16(float32(math.NaN())))) {
		t.Error("NaN did not stay NaN")
	}
}
