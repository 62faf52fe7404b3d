package evex

import (
	"bytes"
	"testing"
)

// TestEncodings checks the encoder against the bytes GNU as 2.40 writes for the same
// instructions (objdump -d of `vdpbf16ps %zmm9,%zmm8,%zmm0` and so on).
func TestEncodings(t *testing.T) {
	cases := []struct {
		asm  string
		got  []byte
		want []byte
	}{
		{"vdpbf16ps %zmm9,%zmm8,%zmm0", DPBF16PS(9, 8, 0), []byte{0x62, 0xd2, 0x3e, 0x48, 0x52, 0xc1}},
		{"vdpbf16ps %zmm25,%zmm17,%zmm12", DPBF16PS(25, 17, 12), []byte{0x62, 0x12, 0x76, 0x40, 0x52, 0xe1}},
		{"vdpbf16ps %zmm31,%zmm16,%zmm15", DPBF16PS(31, 16, 15), []byte{0x62, 0x12, 0x7e, 0x40, 0x52, 0xff}},
		{"vdpbf16ps %zmm3,%zmm4,%zmm22", DPBF16PS(3, 4, 22), []byte{0x62, 0xe2, 0x5e, 0x48, 0x52, 0xf3}},
		{"vcvtneps2bf16 %zmm0,%ymm1", CVTNEPS2BF16(0, 1), []byte{0x62, 0xf2, 0x7e, 0x48, 0x72, 0xc8}},
		{"vcvtneps2bf16 %zmm17,%ymm9", CVTNEPS2BF16(17, 9), []byte{0x62, 0x32, 0x7e, 0x48, 0x72, 0xc9}},
		{"vcvtneps2bf16 %zmm5,%ymm20", CVTNEPS2BF16(5, 20), []byte{0x62, 0xe2, 0x7e, 0x48, 0x72, 0xe5}},
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: % x, want % x", c.asm, c.got, c.want)
		}
	}
}

func TestRejectsRegister(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("register 32 encoded")
		}
	}()
	DPBF16PS(32, 0, 0)
}
