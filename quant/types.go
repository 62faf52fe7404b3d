// Package quant defines the weight storage types the engine keeps in memory: 32- and 16-bit
// floats and llama.cpp's block quantizations (Q8_0, Q4_0, Q4_K, Q6_K), with their block layouts,
// reference quantizers and dequantizers that match llama.cpp bit for bit. The numbering is GGML's,
// so a GGUF tensor's type field converts without a table.
package quant

import "fmt"

// Type is a tensor's storage type, numbered as GGML numbers it (ggml_type).
type Type uint32

// The storage types this engine reads. Other GGML types are refused by name where they appear.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	Q4_K Type = 12
	Q6_K Type = 14
	BF16 Type = 30
)

// typeInfo is one type's block geometry: BlockSize elements are stored in BlockBytes bytes.
type typeInfo struct {
	name       string
	blockSize  int
	blockBytes int
}

var types = map[Type]typeInfo{
	F32:  {"f32", 1, 4},
	F16:  {"f16", 1, 2},
	BF16: {"bf16", 1, 2},
	Q8_0: {"q8_0", 32, 2 + 32},
	Q4_0: {"q4_0", 32, 2 + 16},
	Q4_K: {"q4_k", 256, 2 + 2 + 12 + 128},
	Q6_K: {"q6_k", 256, 128 + 64 + 16 + 2},
}

// Known reports whether t is a type this engine can store and compute with.
func (t Type) Known() bool { _, ok := types[t]; return ok }

// String is the lower-case name llama.cpp's tools print (f32, bf16, q8_0, q4_k, ...).
func (t Type) String() string {
	if info, ok := types[t]; ok {
		return info.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// BlockSize is the number of elements one block holds (1 for float types); 0 for unknown types.
func (t Type) BlockSize() int { return types[t].blockSize }

// BlockBytes is the size in bytes of one block; 0 for unknown types.
func (t Type) BlockBytes() int { return types[t].blockBytes }

// Quantized reports whether t is a block quantization rather than a float type.
func (t Type) Quantized() bool { return t.BlockSize() > 1 }

// RowBytes is the size in bytes of a row of cols elements, or an error when t is unknown or cols
// is not a whole number of blocks.
func (t Type) RowBytes(cols int) (int, error) {
	info, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("unsupported tensor type %s", t)
	}
	if cols < 0 || cols%info.blockSize != 0 {
		return 0, fmt.Errorf("%s rows need a multiple of %d elements, have %d", info.name, info.blockSize, cols)
	}
	return cols / info.blockSize * info.blockBytes, nil
}

// ParseType reads a type name as --quantization and --kv-cache-dtype spell it (case-insensitive:
// f32, f16, bf16, q8_0, q4_0, q4_k, q6_k).
func ParseType(name string) (Type, error) {
	for t, info := range types {
		if equalFold(name, info.name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown type %q (want one of f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)", name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
