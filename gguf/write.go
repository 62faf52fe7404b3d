package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/llmserve/llmserve/quant"
)

// Writer builds a GGUF v3 file: metadata in the order set, then tensors in the order added. Tensor
// data is written from the caller's bytes or produced by a callback at write time, so a large
// model need not be held twice in memory.
type Writer struct {
	// kv is the metadata in order; keys indexes it.
	kv   []KV
	keys map[string]int
	// tensors is the tensors in order; names guards against duplicates.
	tensors []writerTensor
	names   map[string]bool
	// alignment is the data alignment (general.alignment when set, else DefaultAlignment).
	alignment int
}

// writerTensor is one tensor to write: its description and where its bytes come from.
type writerTensor struct {
	info TensorInfo
	data []byte
	// fill writes exactly info.Size bytes when data is nil.
	fill func(io.Writer) error
}

// NewWriter returns an empty writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]int{}, names: map[string]bool{}, alignment: DefaultAlignment}
}

// Set sets a metadata key (replacing an earlier value in place). Values are Go scalars or slices
// of the GGUF types (see Value), or a Value. general.alignment must be a uint32 power of two.
func (w *Writer) Set(key string, x any) error {
	v, err := valueOf(x)
	if err != nil {
		return fmt.Errorf("gguf: %s: %w", key, err)
	}
	if key == "general.alignment" {
		a, ok := v.Uint()
		if v.Type != TypeUint32 || !ok || a == 0 || a&(a-1) != 0 {
			return fmt.Errorf("gguf: general.alignment must be a uint32 power of two")
		}
		w.alignment = int(a)
	}
	if i, ok := w.keys[key]; ok {
		w.kv[i].Value = v
		return nil
	}
	w.keys[key] = len(w.kv)
	w.kv = append(w.kv, KV{Key: key, Value: v})
	return nil
}

// AddTensor adds a tensor of type t with GGML dims (Dims[0] innermost) whose bytes are data.
func (w *Writer) AddTensor(name string, t quant.Type, dims []uint64, data []byte) error {
	info, err := w.info(name, t, dims)
	if err != nil {
		return err
	}
	if int64(len(data)) != info.Size {
		return fmt.Errorf("gguf: tensor %q: %s%v needs %d bytes, have %d", name, t, dims, info.Size, len(data))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: info, data: data})
	return nil
}

// AddTensorFunc adds a tensor whose bytes fill writes when the file is written; it must write
// exactly the tensor's size.
func (w *Writer) AddTensorFunc(name string, t quant.Type, dims []uint64, fill func(io.Writer) error) error {
	info, err := w.info(name, t, dims)
	if err != nil {
		return err
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: info, fill: fill})
	return nil
}

func (w *Writer) info(name string, t quant.Type, dims []uint64) (TensorInfo, error) {
	if w.names[name] {
		return TensorInfo{}, fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return TensorInfo{}, fmt.Errorf("gguf: tensor %q has %d dimensions, want 1 to %d", name, len(dims), maxDims)
	}
	info := TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: t}
	rb, err := t.RowBytes(int(dims[0]))
	if err != nil {
		return TensorInfo{}, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	info.Size = int64(rb)
	for _, d := range dims[1:] {
		info.Size *= int64(d)
	}
	return info, nil
}

// WriteFile writes the file to path.
func (w *Writer) WriteFile(path string) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(fh); err != nil {
		fh.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return fh.Close()
}

// countingWriter counts what passes through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteTo writes the whole file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	bw := bufio.NewWriterSize(out, 1<<20)
	cw := &countingWriter{w: bw}
	e := &encoder{w: cw}
	e.bytes([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kv)))
	for _, kv := range w.kv {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		e.value(kv.Value)
	}
	// Offsets: each tensor starts at the next multiple of the alignment.
	var off uint64
	a := uint64(w.alignment)
	for i := range w.tensors {
		t := &w.tensors[i]
		t.info.Offset = off
		off = alignUp(off+uint64(t.info.Size), a)
		e.str(t.info.Name)
		e.u32(uint32(len(t.info.Dims)))
		for _, d := range t.info.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.info.Type))
		e.u64(t.info.Offset)
	}
	if e.err != nil {
		return cw.n, e.err
	}
	pad := func() {
		if r := uint64(cw.n) % a; r != 0 {
			e.bytes(make([]byte, a-r))
		}
	}
	pad()
	for _, t := range w.tensors {
		start := cw.n
		if t.data != nil {
			e.bytes(t.data)
		} else if e.err == nil {
			e.err = t.fill(cw)
		}
		if e.err != nil {
			return cw.n, fmt.Errorf("gguf: tensor %q: %w", t.info.Name, e.err)
		}
		if cw.n-start != t.info.Size {
			return cw.n, fmt.Errorf("gguf: tensor %q: wrote %d bytes, want %d", t.info.Name, cw.n-start, t.info.Size)
		}
		pad()
	}
	if e.err != nil {
		return cw.n, e.err
	}
	return cw.n, bw.Flush()
}

// encoder writes little-endian values and keeps the first error.
type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) bytes(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) u32(x uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], x)
	e.bytes(e.buf[:4])
}

func (e *encoder) u64(x uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], x)
	e.bytes(e.buf[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.bytes([]byte(s))
}

// scalar writes x (held as Value holds it) as type t.
func (e *encoder) scalar(t ValueType, x any) {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		var u uint64
		switch x := x.(type) {
		case uint64:
			u = x
		case int64:
			u = uint64(x)
		}
		n := t.fixedSize()
		binary.LittleEndian.PutUint64(e.buf[:], u)
		e.bytes(e.buf[:n])
	case TypeFloat32:
		e.u32(math.Float32bits(float32(x.(float64))))
	case TypeFloat64:
		e.u64(math.Float64bits(x.(float64)))
	case TypeBool:
		if x.(bool) {
			e.bytes([]byte{1})
		} else {
			e.bytes([]byte{0})
		}
	case TypeString:
		e.str(x.(string))
	default:
		e.err = errors.Join(e.err, fmt.Errorf("gguf: cannot write a value of type %s", t))
	}
}

func (e *encoder) value(v Value) {
	if v.Type != TypeArray {
		e.scalar(v.Type, v.v)
		return
	}
	e.u32(uint32(v.Elem))
	e.u64(uint64(v.Len()))
	switch x := v.v.(type) {
	case []uint8:
		e.bytes(x)
	case []int8:
		for _, y := range x {
			e.scalar(TypeInt8, int64(y))
		}
	case []uint16:
		for _, y := range x {
			e.scalar(TypeUint16, uint64(y))
		}
	case []int16:
		for _, y := range x {
			e.scalar(TypeInt16, int64(y))
		}
	case []uint32:
		for _, y := range x {
			e.u32(y)
		}
	case []int32:
		for _, y := range x {
			e.u32(uint32(y))
		}
	case []float32:
		for _, y := range x {
			e.u32(math.Float32bits(y))
		}
	case []bool:
		for _, y := range x {
			e.scalar(TypeBool, y)
		}
	case []string:
		for _, y := range x {
			e.str(y)
		}
	case []uint64:
		for _, y := range x {
			e.u64(y)
		}
	case []int64:
		for _, y := range x {
			e.u64(uint64(y))
		}
	case []float64:
		for _, y := range x {
			e.u64(math.Float64bits(y))
		}
	case []Value:
		for _, y := range x {
			if y.Type != TypeArray {
				e.err = errors.Join(e.err, errors.New("gguf: an array of arrays holds a non-array"))
				return
			}
			e.value(y)
		}
	default:
		e.err = errors.Join(e.err, fmt.Errorf("gguf: cannot write an array of %T", v.v))
	}
}
