package model

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/internal/mmap"
)

// DType is a safetensors element type, spelled as in the file header.
type DType string

// The element types a safetensors header may declare. Only F32, F16 and BF16 convert to float32;
// the others are recognised so that files carrying, say, integer buffers still open.
const (
	F64     DType = "F64"
	F32     DType = "F32"
	F16     DType = "F16"
	BF16    DType = "BF16"
	F8E4M3  DType = "F8_E4M3"
	F8E5M2  DType = "F8_E5M2"
	I64     DType = "I64"
	I32     DType = "I32"
	I16     DType = "I16"
	I8      DType = "I8"
	U64     DType = "U64"
	U32     DType = "U32"
	U16     DType = "U16"
	U8      DType = "U8"
	Boolean DType = "BOOL"
)

// Size is the number of bytes per element, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case F8E4M3, F8E5M2, I8, U8, Boolean:
		return 1
	}
	return 0
}

// maxHeaderBytes bounds the JSON header, as the reference implementation does, so a corrupt
// length cannot make the parser allocate gigabytes.
const maxHeaderBytes = 100 << 20

// TensorInfo describes one tensor of a safetensors file. Begin and End are byte offsets into the
// data section, which starts right after the header.
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a parsed, validated safetensors header.
type Header struct {
	// Tensors are sorted by Begin.
	Tensors  []TensorInfo
	Metadata map[string]string
	// DataStart is the file offset of the data section (8 + header length).
	DataStart int64
}

type rawTensorInfo struct {
	DType       DType   `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the header of a complete safetensors file held in file: an
// 8-byte little-endian header length, a JSON object {name: {dtype, shape, data_offsets}} with an
// optional "__metadata__" string map, then the data. Every tensor must lie inside the data
// section, have exactly prod(shape)·sizeof(dtype) bytes, and overlap no other tensor. Malformed
// input returns an error; it never panics.
func ParseHeader(file []byte) (*Header, error) {
	if len(file) < 8 {
		return nil, fmt.Errorf("safetensors: file is %d bytes, shorter than the 8-byte header length", len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > maxHeaderBytes {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the %d-byte limit", n, maxHeaderBytes)
	}
	if n > uint64(len(file)-8) {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the %d bytes after it", n, len(file)-8)
	}
	headerEnd := 8 + int64(n)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(file[8:headerEnd], &raw); err != nil {
		return nil, fmt.Errorf("safetensors: decode header: %w", err)
	}
	if raw == nil {
		return nil, errors.New("safetensors: header is not a JSON object")
	}
	dataLen := int64(len(file)) - headerEnd
	h := &Header{DataStart: headerEnd}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__: %w", err)
			}
			continue
		}
		info, err := parseTensorInfo(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, info)
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	// Sorted by Begin, a non-empty tensor overlaps an earlier one exactly when it starts before
	// the furthest end seen so far. Empty tensors occupy no bytes and may sit anywhere.
	var last *TensorInfo
	for i := range h.Tensors {
		cur := &h.Tensors[i]
		if cur.End == cur.Begin {
			continue
		}
		if last != nil && cur.Begin < last.End {
			return nil, fmt.Errorf("safetensors: tensors %q [%d,%d) and %q [%d,%d) overlap",
				last.Name, last.Begin, last.End, cur.Name, cur.Begin, cur.End)
		}
		if last == nil || cur.End > last.End {
			last = cur
		}
	}
	return h, nil
}

func parseTensorInfo(name string, msg json.RawMessage, dataLen int64) (TensorInfo, error) {
	var r rawTensorInfo
	if err := json.Unmarshal(msg, &r); err != nil {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	size := r.DType.Size()
	if size == 0 {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, r.DType)
	}
	if len(r.DataOffsets) != 2 {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: data_offsets has %d entries, want 2", name, len(r.DataOffsets))
	}
	begin, end := r.DataOffsets[0], r.DataOffsets[1]
	if begin < 0 || end < begin || end > dataLen {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: data_offsets [%d,%d) outside the %d-byte data section",
			name, begin, end, dataLen)
	}
	// The product is checked for overflow at every step, so a shape cannot wrap around to match
	// the byte count.
	numel := uint64(1)
	shape := make([]int, len(r.Shape))
	for i, d := range r.Shape {
		if d < 0 {
			return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: invalid shape %v", name, r.Shape)
		}
		shape[i] = int(d)
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > math.MaxInt64/8 {
			return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: shape %v overflows", name, r.Shape)
		}
		numel = lo
	}
	if want := int64(numel) * int64(size); end-begin != want {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: %s%v needs %d bytes, data_offsets [%d,%d) hold %d",
			name, r.DType, r.Shape, want, begin, end, end-begin)
	}
	return TensorInfo{Name: name, DType: r.DType, Shape: shape, Begin: begin, End: end}, nil
}

// File is an open, memory-mapped safetensors file.
type File struct {
	Path   string
	Header *Header
	data   []byte
	byName map[string]int
	unmap  func() error
}

// OpenSafetensors maps path into memory and parses its header. Close releases the mapping.
func OpenSafetensors(path string) (*File, error) {
	data, unmap, err := mmap.File(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors %s: %w", path, err)
	}
	h, err := ParseHeader(data)
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("open safetensors %s: %w", path, err)
	}
	f := &File{Path: path, Header: h, data: data, byName: make(map[string]int, len(h.Tensors)), unmap: unmap}
	for i, t := range h.Tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Header.Tensors[i], true
}

// Float32 converts the named tensor to a new float32 slice.
func (f *File) Float32(name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	dst := make([]float32, t.NumElements())
	if err := f.ReadFloat32(t, dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// ReadFloat32 converts tensor t of this file into dst, which must hold exactly its elements.
func (f *File) ReadFloat32(t TensorInfo, dst []float32) error {
	if len(dst) != t.NumElements() {
		return fmt.Errorf("%s: tensor %q has %d elements, destination %d", f.Path, t.Name, t.NumElements(), len(dst))
	}
	if f.data == nil {
		return fmt.Errorf("%s: file is closed", f.Path)
	}
	raw := f.data[f.Header.DataStart+t.Begin : f.Header.DataStart+t.End]
	if err := DecodeFloat32(dst, t.DType, raw); err != nil {
		return fmt.Errorf("%s: tensor %q: %w", f.Path, t.Name, err)
	}
	return nil
}

// Close unmaps the file. Slices returned by Float32 stay valid; they are copies.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	f.data = nil
	if err := f.unmap(); err != nil {
		return fmt.Errorf("close safetensors %s: %w", f.Path, err)
	}
	return nil
}

// DecodeFloat32 converts little-endian elements of type dt in raw to float32 in dst.
func DecodeFloat32(dst []float32, dt DType, raw []byte) error {
	size := dt.Size()
	if size == 0 || len(raw) != len(dst)*size {
		return fmt.Errorf("decode %s: %d bytes for %d elements", dt, len(raw), len(dst))
	}
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
		}
	default:
		return fmt.Errorf("dtype %s cannot be converted to float32 (want F32, F16, BF16 or F64)", dt)
	}
	return nil
}

// HalfToFloat32 converts an IEEE 754 binary16 value, including subnormals, infinities and NaNs.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN: keep the payload.
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal: value = mant · 2^-24, exact in float32.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// Float32ToBF16 rounds to nearest-even bfloat16, the way PyTorch converts. NaNs stay NaN.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// safeShardName rejects index entries that would reach outside the model directory.
func safeShardName(name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("shard file name %q must be a plain file name in the model directory", name)
	}
	return nil
}

// Float32ToHalf rounds to nearest-even IEEE 754 binary16, with overflow to infinity, gradual
// underflow to subnormals, and NaNs kept NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // too large even before rounding
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e <= 0 {
		// Subnormal (or zero): shift the significand with its implicit bit into place.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity, which is the right rounding
	}
	return sign | uint16(r)
}
