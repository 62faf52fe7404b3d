package model

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile assembles a safetensors file from a header value and data bytes.
func rawFile(t testing.TB, header any, data []byte) []byte {
	t.Helper()
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	return append(append(out, h...), data...)
}

func TestParseHeaderValid(t *testing.T) {
	data := make([]byte, 24)
	file := rawFile(t, map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		"b":            map[string]any{"dtype": "BF16", "shape": []int{2, 2}, "data_offsets": []int{16, 24}},
		"a":            map[string]any{"dtype": "F32", "shape": []int{2, 2}, "data_offsets": []int{0, 16}},
		"empty":        map[string]any{"dtype": "F16", "shape": []int{0, 3}, "data_offsets": []int{8, 8}},
		"scalar":       map[string]any{"dtype": "U8", "shape": []int{}, "data_offsets": []int{24, 24}},
	}, data)
	// The scalar claims one byte but holds none: rejected. Fix it up to the last byte instead.
	if _, err := ParseHeader(file); err == nil || !strings.Contains(err.Error(), "scalar") {
		t.Fatalf("scalar with no bytes: %v", err)
	}
	file = rawFile(t, map[string]any{
		"__metadata__": map[string]string{"format": "pt"},
		"b":            map[string]any{"dtype": "BF16", "shape": []int{2, 2}, "data_offsets": []int{16, 24}},
		"a":            map[string]any{"dtype": "F32", "shape": []int{2, 2}, "data_offsets": []int{0, 16}},
		"empty":        map[string]any{"dtype": "F16", "shape": []int{1000, 0}, "data_offsets": []int{8, 8}},
		"scalar":       map[string]any{"dtype": "U8", "shape": []int{}, "data_offsets": []int{24, 25}},
	}, make([]byte, 25))
	h, err := ParseHeader(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != 4 || h.Tensors[0].Name != "a" || h.Metadata["format"] != "pt" {
		t.Errorf("header: %+v", h)
	}
}

func TestParseHeaderRejects(t *testing.T) {
	tensor := func(dtype string, shape []int, begin, end int) map[string]any {
		return map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{begin, end}}
	}
	for _, tc := range []struct {
		name    string
		file    []byte
		wantErr string
	}{
		{"short", []byte{1, 2, 3}, "shorter"},
		{"length past end", binary.LittleEndian.AppendUint64(nil, 100), "exceeds"},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<62), "limit"},
		{"not json", append(binary.LittleEndian.AppendUint64(nil, 3), "{x}"...), "decode"},
		{"null header", append(binary.LittleEndian.AppendUint64(nil, 4), "null"...), "not a JSON object"},
		{"offset past data", rawFile(t, map[string]any{"w": tensor("F32", []int{2}, 0, 8)}, make([]byte, 4)), "outside"},
		{"size mismatch", rawFile(t, map[string]any{"w": tensor("F32", []int{3}, 0, 8)}, make([]byte, 8)), "needs 12 bytes"},
		{"reversed offsets", rawFile(t, map[string]any{"w": tensor("F32", []int{0}, 8, 4)}, make([]byte, 8)), "outside"},
		{"overlap", rawFile(t, map[string]any{"w": tensor("F32", []int{2}, 0, 8), "v": tensor("F32", []int{2}, 4, 12)}, make([]byte, 12)), "overlap"},
		{"overlap behind empty", rawFile(t, map[string]any{
			"a": tensor("U8", []int{10}, 0, 10), "b": tensor("U8", []int{0}, 2, 2), "c": tensor("U8", []int{2}, 5, 7),
		}, make([]byte, 10)), "overlap"},
		{"unknown dtype", rawFile(t, map[string]any{"w": tensor("F12", []int{1}, 0, 2)}, make([]byte, 2)), "unknown dtype"},
		{"negative dim", rawFile(t, map[string]any{"w": tensor("F32", []int{-1}, 0, 4)}, make([]byte, 4)), "shape"},
		{"overflowing shape", rawFile(t, map[string]any{"w": tensor("U8", []int{1 << 40, 1 << 40, 1 << 40, 0}, 0, 0)}, nil), "overflows"},
		{"wrapping shape", rawFile(t, map[string]any{"w": tensor("F32", []int{1 << 61, 8}, 0, 0)}, nil), "overflows"},
		{"three offsets", rawFile(t, map[string]any{"w": map[string]any{"dtype": "F32", "shape": []int{1}, "data_offsets": []int{0, 4, 8}}}, make([]byte, 8)), "2"},
		{"bad metadata", rawFile(t, map[string]any{"__metadata__": []int{1}}, nil), "__metadata__"},
	} {
		_, err := ParseHeader(tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: got %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestDecodeFloat32(t *testing.T) {
	dst := make([]float32, 2)
	if err := DecodeFloat32(dst, BF16, []byte{0x80, 0x3f, 0x00, 0xc0}); err != nil || dst[0] != 1 || dst[1] != -2 {
		t.Errorf("BF16: %v %v", dst, err)
	}
	if err := DecodeFloat32(dst, F16, []byte{0x00, 0x3c, 0x00, 0xc0}); err != nil || dst[0] != 1 || dst[1] != -2 {
		t.Errorf("F16: %v %v", dst, err)
	}
	if err := DecodeFloat32(dst, I32, make([]byte, 8)); err == nil {
		t.Error("I32 converted to float32")
	}
	if err := DecodeFloat32(dst, F32, make([]byte, 4)); err == nil {
		t.Error("short F32 buffer accepted")
	}
}

// FuzzSafetensorsHeader feeds arbitrary files to the parser: it must return an error or a header
// whose every tensor lies inside the file, never panic.
func FuzzSafetensorsHeader(f *testing.F) {
	for _, name := range []string{"qwen3", "qwen3-bf16"} {
		data, err := os.ReadFile(filepath.Join(fixtureDir, name, "model.safetensors"))
		if err != nil {
			f.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(data)
		// The header plus a little data keeps seeds small; most tensors then fall outside.
		f.Add(data[:8+n+64])
	}
	f.Add(rawFile(f, map[string]any{"w": map[string]any{"dtype": "F16", "shape": []int{2}, "data_offsets": []int{0, 4}}}, make([]byte, 4)))
	f.Add(rawFile(f, map[string]any{"__metadata__": map[string]string{"k": "v"}}, nil))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, '{', '}'})
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := ParseHeader(file)
		if err != nil {
			return
		}
		for _, ti := range h.Tensors {
			if h.DataStart+ti.End > int64(len(file)) || ti.Begin > ti.End {
				t.Fatalf("tensor %q [%d,%d) outside file of %d bytes", ti.Name, ti.Begin, ti.End, len(file))
			}
			dst := make([]float32, ti.NumElements())
			raw := file[h.DataStart+ti.Begin : h.DataStart+ti.End]
			if err := DecodeFloat32(dst, ti.DType, raw); err != nil && (ti.DType == F32 || ti.DType == F16 || ti.DType == BF16) {
				t.Fatalf("tensor %q: %v", ti.Name, err)
			}
		}
	})
}
