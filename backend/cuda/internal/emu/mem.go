package emu

import (
	"fmt"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// fault is the panic a reference raises on a bad access; run turns it into the launch's error.
type fault struct{ err error }

// mem gives references typed, bounds-checked views of device memory.
type mem struct{ d *Device }

func (m *mem) raw(p dev.Ptr, n, size int) []byte {
	if p%dev.Ptr(size) != 0 {
		panic(fault{fmt.Errorf("address %#x is not %d-byte aligned", p, size)})
	}
	b, err := m.d.bytes(p, n*size)
	if err != nil {
		panic(fault{err})
	}
	return b
}

// bytes is n bytes at p (quantized weights: no alignment beyond a byte).
func (m *mem) bytes(p dev.Ptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return m.raw(p, n, 1)
}

func (m *mem) f32(p dev.Ptr, n int) []float32 {
	if n == 0 {
		return nil
	}
	b := m.raw(p, n, 4)
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

func (m *mem) u16(p dev.Ptr, n int) []uint16 {
	if n == 0 {
		return nil
	}
	b := m.raw(p, n, 2)
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
}

func (m *mem) i32(p dev.Ptr, n int) []int32 {
	if n == 0 {
		return nil
	}
	b := m.raw(p, n, 4)
	return unsafe.Slice((*int32)(unsafe.Pointer(&b[0])), n)
}

func (m *mem) u64(p dev.Ptr, n int) []uint64 {
	if n == 0 {
		return nil
	}
	b := m.raw(p, n, 8)
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
}

// opt is like f32 but returns nil for a null pointer (an optional operand).
func (m *mem) opt(p dev.Ptr, n int) []float32 {
	if p == 0 {
		return nil
	}
	return m.f32(p, n)
}

// rows returns SampleRow i of the array at p.
func (m *mem) sampleRows(p dev.Ptr, n int) []dev.SampleRow {
	if n == 0 {
		return nil
	}
	size := int(unsafe.Sizeof(dev.SampleRow{}))
	b := m.raw(p, n*size/4, 4)
	return unsafe.Slice((*dev.SampleRow)(unsafe.Pointer(&b[0])), n)
}
