package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize stores src, a whole number of rows of cols elements, as type t: GGUF's tensor data,
// row after row, each t.RowBytes(cols) bytes. The block quantizations are llama.cpp's reference
// quantizers (what llama-quantize writes without an importance matrix), bit for bit; the float
// types round to nearest even. Quantized types refuse NaN and infinite inputs, which have no
// block encoding.
func Quantize(t Type, src []float32, cols int) ([]byte, error) {
	rowBytes, err := t.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	if cols == 0 || len(src)%cols != 0 {
		return nil, fmt.Errorf("quantize %s: %d values are not whole rows of %d", t, len(src), cols)
	}
	dst := make([]byte, len(src)/cols*rowBytes)
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return dst, nil
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], ToF16(v))
		}
		return dst, nil
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], ToBF16(v))
		}
		return dst, nil
	}
	for i, v := range src {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("quantize %s: value %d (row %d) is %v", t, i, i/cols, v)
		}
	}
	switch t {
	case Q8_0:
		quantizeQ8_0(src, dst)
	case Q4_0:
		quantizeQ4_0(src, dst)
	case Q4_K:
		quantizeQ4_K(src, dst)
	case Q6_K:
		quantizeQ6_K(src, dst)
	default:
		return nil, fmt.Errorf("quantize: no quantizer for %s", t)
	}
	return dst, nil
}

// Dequantize widens src, stored as type t, into dst: len(dst) elements, a whole number of blocks,
// taking exactly t.RowBytes(len(dst)) bytes of src. The results equal llama.cpp's dequantize_row_*
// (to_float) bit for bit. Any bytes decode (corrupt scales give NaN or infinities, never a panic).
func Dequantize(t Type, src []byte, dst []float32) error {
	n, err := t.RowBytes(len(dst))
	if err != nil {
		return fmt.Errorf("dequantize: %w", err)
	}
	if len(src) != n {
		return fmt.Errorf("dequantize %s: %d elements take %d bytes, have %d", t, len(dst), n, len(src))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = FromF16(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = FromBF16(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		dequantizeQ8_0(src, dst)
	case Q4_0:
		dequantizeQ4_0(src, dst)
	case Q4_K:
		dequantizeQ4_K(src, dst)
	case Q6_K:
		dequantizeQ6_K(src, dst)
	default:
		return fmt.Errorf("dequantize: no dequantizer for %s", t)
	}
	return nil
}
