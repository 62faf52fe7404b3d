// Package gguf reads and writes GGUF files, the model format of llama.cpp and Ollama: a header,
// typed metadata key/value pairs, tensor descriptions, and aligned tensor data. The reader checks
// every count, length and offset against the file's size, so a corrupt or hostile file is an
// error, never a panic or an allocation larger than the file; tensor data is returned as views of
// the file's memory mapping, without copying.
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/quant"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// maxDims is GGML_MAX_DIMS: a tensor has at most four dimensions.
const maxDims = 4

// maxArrayDepth bounds arrays of arrays so a crafted file cannot recurse deeply.
const maxArrayDepth = 8

// KV is one metadata key/value pair.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims are in GGML order: Dims[0] is the number of elements in a
// row (the innermost, contiguous dimension), so a Hugging Face [rows][cols] matrix has Dims
// [cols, rows].
type TensorInfo struct {
	Name string
	Dims []uint64
	Type quant.Type
	// Offset is the tensor's byte offset from the start of the data section.
	Offset uint64
	// Size is the tensor's size in bytes, or -1 when Type is not one quant knows.
	Size int64
}

// Elements is the product of Dims.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape is Dims in Hugging Face order (outermost first) as ints: [rows, cols] for a matrix.
func (t TensorInfo) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(s)-1-i] = int(d)
	}
	return s
}

// File is a parsed GGUF file. Its tensor data views stay valid until Close.
type File struct {
	// Version is the format version (2 or 3).
	Version uint32
	// KV is the metadata in file order.
	KV []KV
	// Tensors is the tensor descriptions in file order.
	Tensors []TensorInfo
	// Alignment is general.alignment, or DefaultAlignment.
	Alignment int
	// DataOffset is the file offset of the tensor data section.
	DataOffset int64

	// data is the whole file (a memory mapping from Open, or the caller's bytes from Parse).
	data []byte
	// index maps keys to KV positions and tensor names to Tensors positions.
	index, tensorIndex map[string]int
	// closer unmaps data; nil for Parse.
	closer func() error
}

// reader walks the file's bytes with bounds checks; every read that would pass the end fails.
type reader struct {
	b   []byte
	off int
}

var errTruncated = errors.New("unexpected end of file")

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > r.remaining() {
		return nil, errTruncated
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p, nil
}

func (r *reader) u32() (uint32, error) {
	p, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (r *reader) u64() (uint64, error) {
	p, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

// count reads an element count and checks that count elements of at least minSize bytes each fit
// in what is left of the file, so nothing is allocated for elements that cannot be there.
func (r *reader) count(minSize int) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(r.remaining()/minSize) {
		return 0, fmt.Errorf("count %d needs at least %d bytes each, only %d bytes remain", n, minSize, r.remaining())
	}
	return int(n), nil
}

func (r *reader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(r.remaining()) {
		return "", fmt.Errorf("string of %d bytes, only %d bytes remain", n, r.remaining())
	}
	p, _ := r.bytes(int(n))
	return string(p), nil
}

// Parse parses a GGUF file held in memory. data must stay unchanged while the File is used.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	magic, err := r.bytes(4)
	if err != nil {
		return nil, fmt.Errorf("gguf: file of %d bytes has no header", len(data))
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("gguf: bad magic %q (want %q)", magic, Magic)
	}
	f := &File{data: data, Alignment: DefaultAlignment}
	if f.Version, err = r.u32(); err != nil {
		return nil, fmt.Errorf("gguf: header: %w", err)
	}
	switch {
	case f.Version == 2 || f.Version == 3:
	case f.Version == 1:
		return nil, errors.New("gguf: version 1 files are not supported (32-bit counts; convert with a current llama.cpp)")
	case f.Version&0xffff == 0 && bits.ReverseBytes32(f.Version) <= 3:
		return nil, errors.New("gguf: big-endian files are not supported")
	default:
		return nil, fmt.Errorf("gguf: unsupported version %d (want 2 or 3)", f.Version)
	}
	// Each tensor description takes at least 8 (name) + 4 (dims) + 4 (type) + 8 (offset) bytes;
	// each key/value pair at least 8 (key) + 4 (type) + 1.
	tensorCount, err := r.u64()
	if err != nil {
		return nil, fmt.Errorf("gguf: header: %w", err)
	}
	kvCount, err := r.count(13)
	if err != nil {
		return nil, fmt.Errorf("gguf: metadata count: %w", err)
	}
	if tensorCount > uint64(r.remaining()/24) {
		return nil, fmt.Errorf("gguf: tensor count %d does not fit in the %d bytes of the file", tensorCount, len(data))
	}
	f.index = make(map[string]int, kvCount)
	f.KV = make([]KV, 0, kvCount)
	for i := range kvCount {
		key, err := r.str()
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata key %d: %w", i, err)
		}
		typ, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata %q: %w", key, err)
		}
		v, err := r.value(ValueType(typ), 0)
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata %q: %w", key, err)
		}
		if _, dup := f.index[key]; dup {
			return nil, fmt.Errorf("gguf: metadata key %q appears twice", key)
		}
		f.index[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Uint()
		if v.Type != TypeUint32 || !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("gguf: general.alignment must be a uint32 power of two, got %s %v", v.describe(), v.v)
		}
		f.Alignment = int(a)
	}
	f.tensorIndex = make(map[string]int, tensorCount)
	f.Tensors = make([]TensorInfo, 0, tensorCount)
	for i := range int(tensorCount) {
		t, err := r.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("gguf: tensor %d: %w", i, err)
		}
		if _, dup := f.tensorIndex[t.Name]; dup {
			return nil, fmt.Errorf("gguf: tensor %q appears twice", t.Name)
		}
		f.tensorIndex[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	// The data section starts at the next multiple of the alignment (the end of the file when
	// there are no tensors and no padding).
	start := alignUp(uint64(r.off), uint64(f.Alignment))
	if start > uint64(len(data)) {
		if len(f.Tensors) > 0 {
			return nil, fmt.Errorf("gguf: data section at %d is past the end of the %d-byte file", start, len(data))
		}
		start = uint64(len(data))
	}
	f.DataOffset = int64(start)
	if err := f.checkTensors(); err != nil {
		return nil, err
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// value reads one value of type typ; depth counts enclosing arrays.
func (r *reader) value(typ ValueType, depth int) (Value, error) {
	v := Value{Type: typ}
	switch typ {
	case TypeUint8, TypeUint16, TypeUint32, TypeUint64:
		p, err := r.bytes(typ.fixedSize())
		if err != nil {
			return v, err
		}
		v.v = leUint(p)
	case TypeInt8, TypeInt16, TypeInt32, TypeInt64:
		p, err := r.bytes(typ.fixedSize())
		if err != nil {
			return v, err
		}
		v.v = leInt(p)
	case TypeFloat32:
		x, err := r.u32()
		if err != nil {
			return v, err
		}
		v.v = float64(math.Float32frombits(x))
	case TypeFloat64:
		x, err := r.u64()
		if err != nil {
			return v, err
		}
		v.v = math.Float64frombits(x)
	case TypeBool:
		p, err := r.bytes(1)
		if err != nil {
			return v, err
		}
		if p[0] > 1 {
			return v, fmt.Errorf("bool byte is %d, want 0 or 1", p[0])
		}
		v.v = p[0] == 1
	case TypeString:
		s, err := r.str()
		if err != nil {
			return v, err
		}
		v.v = s
	case TypeArray:
		if depth >= maxArrayDepth {
			return v, fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
		}
		et, err := r.u32()
		if err != nil {
			return v, err
		}
		v.Elem = ValueType(et)
		if v.Elem.minSize() == 0 {
			return v, fmt.Errorf("array of unknown type %s", v.Elem)
		}
		n, err := r.count(v.Elem.minSize())
		if err != nil {
			return v, fmt.Errorf("array[%s]: %w", v.Elem, err)
		}
		if v.v, err = r.array(v.Elem, n, depth); err != nil {
			return v, fmt.Errorf("array[%s]: %w", v.Elem, err)
		}
	default:
		return v, fmt.Errorf("unknown value type %s", typ)
	}
	return v, nil
}

// array reads n elements of type et; the caller checked that n fixed-size elements fit.
func (r *reader) array(et ValueType, n, depth int) (any, error) {
	if size := et.fixedSize(); size > 0 {
		p, err := r.bytes(n * size)
		if err != nil {
			return nil, err
		}
		return decodeFixed(et, p, n)
	}
	switch et {
	case TypeString:
		out := make([]string, n)
		for i := range out {
			s, err := r.str()
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out[i] = s
		}
		return out, nil
	case TypeArray:
		out := make([]Value, n)
		for i := range out {
			var err error
			if out[i], err = r.value(TypeArray, depth+1); err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("array of unknown type %s", et)
}

func decodeFixed(et ValueType, p []byte, n int) (any, error) {
	le := binary.LittleEndian
	switch et {
	case TypeUint8:
		return slices.Clone(p), nil
	case TypeInt8:
		return decodeEach(p, n, 1, func(b []byte) int8 { return int8(b[0]) }), nil
	case TypeBool:
		out := make([]bool, n)
		for i := range out {
			if p[i] > 1 {
				return nil, fmt.Errorf("element %d: bool byte is %d, want 0 or 1", i, p[i])
			}
			out[i] = p[i] == 1
		}
		return out, nil
	case TypeUint16:
		return decodeEach(p, n, 2, le.Uint16), nil
	case TypeInt16:
		return decodeEach(p, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) }), nil
	case TypeUint32:
		return decodeEach(p, n, 4, le.Uint32), nil
	case TypeInt32:
		return decodeEach(p, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) }), nil
	case TypeFloat32:
		return decodeEach(p, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) }), nil
	case TypeUint64:
		return decodeEach(p, n, 8, le.Uint64), nil
	case TypeInt64:
		return decodeEach(p, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) }), nil
	case TypeFloat64:
		return decodeEach(p, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }), nil
	}
	return nil, fmt.Errorf("array of unknown type %s", et)
}

// decodeEach decodes n elements of size bytes each from p with get.
func decodeEach[T any](p []byte, n, size int, get func([]byte) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = get(p[size*i:])
	}
	return out
}

func leUint(p []byte) uint64 {
	var x uint64
	for i := len(p) - 1; i >= 0; i-- {
		x = x<<8 | uint64(p[i])
	}
	return x
}

// leInt sign-extends a little-endian integer of len(p) bytes.
func leInt(p []byte) int64 {
	shift := 64 - 8*len(p)
	return int64(leUint(p)<<shift) >> shift
}

func (r *reader) tensorInfo() (TensorInfo, error) {
	var t TensorInfo
	var err error
	if t.Name, err = r.str(); err != nil {
		return t, fmt.Errorf("name: %w", err)
	}
	nd, err := r.u32()
	if err != nil {
		return t, fmt.Errorf("%q: %w", t.Name, err)
	}
	if nd > maxDims {
		return t, fmt.Errorf("%q has %d dimensions, at most %d are allowed", t.Name, nd, maxDims)
	}
	t.Dims = make([]uint64, nd)
	elems := uint64(1)
	for i := range t.Dims {
		if t.Dims[i], err = r.u64(); err != nil {
			return t, fmt.Errorf("%q: %w", t.Name, err)
		}
		hi, lo := bits.Mul64(elems, t.Dims[i])
		if hi != 0 || lo > math.MaxInt64 {
			return t, fmt.Errorf("%q: dimensions %v overflow", t.Name, t.Dims)
		}
		elems = lo
	}
	typ, err := r.u32()
	if err != nil {
		return t, fmt.Errorf("%q: %w", t.Name, err)
	}
	t.Type = quant.Type(typ)
	if t.Offset, err = r.u64(); err != nil {
		return t, fmt.Errorf("%q: %w", t.Name, err)
	}
	t.Size = -1
	if t.Type.Known() {
		cols := uint64(1)
		if nd > 0 {
			cols = t.Dims[0]
		}
		bs := uint64(t.Type.BlockSize())
		if cols%bs != 0 {
			return t, fmt.Errorf("%q: %s rows need a multiple of %d elements, have %d", t.Name, t.Type, bs, cols)
		}
		hi, lo := bits.Mul64(elems/bs, uint64(t.Type.BlockBytes()))
		if hi != 0 || lo > math.MaxInt64 {
			return t, fmt.Errorf("%q: size overflows", t.Name)
		}
		t.Size = int64(lo)
	}
	return t, nil
}

// checkTensors checks that every tensor is aligned, lies inside the data section, and overlaps no
// other. Tensors of types quant does not know have no size; only their offsets are checked.
func (f *File) checkTensors() error {
	dataLen := uint64(len(f.data)) - uint64(f.DataOffset)
	order := make([]int, len(f.Tensors))
	for i := range order {
		order[i] = i
	}
	for _, t := range f.Tensors {
		if t.Offset%uint64(f.Alignment) != 0 {
			return fmt.Errorf("gguf: tensor %q offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > dataLen || t.Size > 0 && uint64(t.Size) > dataLen-t.Offset {
			return fmt.Errorf("gguf: tensor %q (%s, %d bytes at %d) extends past the %d-byte data section (file truncated?)",
				t.Name, t.Type, t.Size, t.Offset, dataLen)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		x, y := f.Tensors[a].Offset, f.Tensors[b].Offset
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	var end uint64
	prev := -1
	for _, i := range order {
		t := f.Tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev >= 0 && t.Offset < end {
			return fmt.Errorf("gguf: tensors %q and %q overlap", f.Tensors[prev].Name, t.Name)
		}
		if t.Size > 0 {
			end = max(end, t.Offset+uint64(t.Size))
		} else {
			end = max(end, t.Offset+1)
		}
		prev = i
	}
	return nil
}

// Close releases the file's memory mapping; tensor data views are invalid afterwards.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c()
}

// Get returns the value of key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.index[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// String returns the string value of key, or an error naming the key when it is absent or not a
// string.
func (f *File) String(key string) (string, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", fmt.Errorf("gguf: metadata %q is missing", key)
	}
	s, ok := v.Str()
	if !ok {
		return "", fmt.Errorf("gguf: metadata %q is %s, want string", key, v.describe())
	}
	return s, nil
}

// Uint returns the non-negative integer value of key.
func (f *File) Uint(key string) (uint64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is missing", key)
	}
	n, ok := v.Uint()
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is %s %v, want a non-negative integer", key, v.describe(), v.v)
	}
	return n, nil
}

// Float returns the numeric value of key.
func (f *File) Float(key string) (float64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is missing", key)
	}
	x, ok := v.Float()
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is %s, want a number", key, v.describe())
	}
	return x, nil
}

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return false, fmt.Errorf("gguf: metadata %q is missing", key)
	}
	b, ok := v.Bool()
	if !ok {
		return false, fmt.Errorf("gguf: metadata %q is %s, want bool", key, v.describe())
	}
	return b, nil
}

// Strings returns the string-array value of key.
func (f *File) Strings(key string) ([]string, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata %q is missing", key)
	}
	s, ok := v.Strings()
	if !ok {
		return nil, fmt.Errorf("gguf: metadata %q is %s, want array[string]", key, v.describe())
	}
	return s, nil
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensorIndex[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorData returns a view of t's bytes in the file (no copy). Tensors of types quant does not
// know are an error naming the type.
func (f *File) TensorData(t TensorInfo) ([]byte, error) {
	if t.Size < 0 {
		return nil, fmt.Errorf("gguf: tensor %q has unsupported type %s", t.Name, TypeName(t.Type))
	}
	start := uint64(f.DataOffset) + t.Offset
	return f.data[start : start+uint64(t.Size) : start+uint64(t.Size)], nil
}

// ggmlTypeNames names the GGML types quant does not implement, so errors can say which one a
// file uses.
var ggmlTypeNames = map[quant.Type]string{
	3: "q4_1", 6: "q5_0", 7: "q5_1", 9: "q8_1", 10: "q2_k", 11: "q3_k", 13: "q5_k", 15: "q8_k",
	16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s",
	23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 34: "tq1_0",
	35: "tq2_0", 39: "mxfp4",
}

// TypeName is a GGML type's name as llama.cpp prints it, for quant's types and the others.
func TypeName(t quant.Type) string {
	if t.Known() {
		return t.String()
	}
	if n, ok := ggmlTypeNames[t]; ok {
		return n
	}
	return t.String()
}

// Describe summarizes the file for logs: version, counts and general.architecture.
func (f *File) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "GGUF v%d, %d metadata keys, %d tensors", f.Version, len(f.KV), len(f.Tensors))
	if a, err := f.String("general.architecture"); err == nil {
		fmt.Fprintf(&b, ", architecture %s", a)
	}
	return b.String()
}
