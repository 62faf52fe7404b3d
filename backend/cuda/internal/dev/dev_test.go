package dev

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

// The packed buffer is the C parameter layout: natural alignment, no trailing padding.
func TestPackLayout(t *testing.T) {
	a := RMSNormArgs{Out: 1, X: 2, W: 3, RowIdx: 4, Rows: 5, H: 6, Eps: 0.5}
	b := Pack(&a)
	if len(b) != 4*8+3*4 {
		t.Fatalf("%d bytes, want 44 (no trailing padding)", len(b))
	}
	le := binary.LittleEndian
	if le.Uint64(b[24:]) != 4 || le.Uint32(b[36:]) != 6 || math.Float32frombits(le.Uint32(b[40:])) != 0.5 {
		t.Fatalf("fields misplaced: % x", b)
	}
	got, err := Unpack[RMSNormArgs](b)
	if err != nil || got != a {
		t.Fatalf("round trip gave %+v, %v", got, err)
	}
	if _, err := Unpack[RMSNormArgs](b[:40]); err == nil {
		t.Fatal("a short buffer unpacked")
	}
	// a u32 after a u32 then a u64 pads to 8, as C does
	f := FillArgs{Out: 1, N: 2, Seed: 3, Scale: 4}
	if n := len(Pack(&f)); n != 24 {
		t.Fatalf("FillArgs packs to %d bytes, want 24", n)
	}
}

func TestParamsOfEveryKernel(t *testing.T) {
	for k, info := range Kernels {
		ps, err := Params(info.Args)
		if err != nil {
			t.Fatalf("%s: %v", Kernel(k), err)
		}
		if len(ps) == 0 || info.Name == "" || info.File == "" {
			t.Fatalf("kernel %d is incomplete: %+v", k, info)
		}
	}
	type bad struct {
		P uint64
		B bool
	}
	if _, err := Params(reflect.TypeFor[bad]()); err == nil {
		t.Fatal("a bool parameter was accepted")
	}
}
