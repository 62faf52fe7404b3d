package model

import (
	"fmt"
	"unsafe"

	"github.com/llmserve/llmserve/quant"
)

// Matrix is a weight matrix in its storage type: Rows rows of Cols elements in Hugging Face's
// [out_features][in_features] layout, each row Type.RowBytes(Cols) bytes of Data (float32 and
// 16-bit floats little-endian, quantized types in llama.cpp's block layouts). Data may be a view
// of a memory-mapped file.
//
// A fused group (q/k/v, gate/up) whose checkpoint tensors differ in type, as the q/k/v of
// llama.cpp's Q4_K_M files do (v in Q6_K on some layers), keeps each tensor in its own type
// instead: Parts holds them in row order, Data is nil and Type is the first part's.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
	Parts      []Matrix // row blocks of their own types, or nil (see above)
}

// Blocks returns the row blocks of m that each have one storage type: its Parts, or m itself.
func (m Matrix) Blocks() []Matrix {
	if len(m.Parts) > 0 {
		return m.Parts
	}
	return []Matrix{m}
}

// Bytes is the storage m takes.
func (m Matrix) Bytes() int {
	n := len(m.Data)
	for _, p := range m.Parts {
		n += len(p.Data)
	}
	return n
}

// NewMatrix checks that data holds rows×cols elements of type t and wraps it.
func NewMatrix(t quant.Type, rows, cols int, data []byte) (Matrix, error) {
	rb, err := t.RowBytes(cols)
	if err != nil {
		return Matrix{}, err
	}
	if rows < 0 || len(data) != rows*rb {
		return Matrix{}, fmt.Errorf("%s matrix %dx%d needs %d bytes, have %d", t, rows, cols, rows*rb, len(data))
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// RowBytes is the size of one row of m in bytes.
func (m Matrix) RowBytes() int {
	rb, _ := m.Type.RowBytes(m.Cols)
	return rb
}

// Row returns row i's bytes.
func (m Matrix) Row(i int) []byte {
	rb := m.RowBytes()
	return m.Data[i*rb : (i+1)*rb : (i+1)*rb]
}

// F32 views an F32 matrix's data as float32s (nil for other types).
func (m Matrix) F32() []float32 {
	if m.Type != quant.F32 || len(m.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&m.Data[0])), len(m.Data)/4)
}
