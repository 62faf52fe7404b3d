package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
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
	var fn func(x []float32, dst []byte)
	switch t {
	case Q8_0:
		fn = quantizeQ8_0
	case Q4_0:
		fn = quantizeQ4_0
	case Q4_K:
		fn = quantizeQ4_K
	case Q6_K:
		fn = quantizeQ6_K
	default:
		return nil, fmt.Errorf("quantize: no quantizer for %s", t)
	}
	// Blocks are independent, so rows are quantized on all cores (a model's worth of K-quant
	// fitting takes seconds on one); the bytes do not depend on the split.
	rows := len(src) / cols
	per := max(1, (1<<16)/max(cols, 1))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for r0 := 0; r0 < rows; r0 += per {
		r1 := min(rows, r0+per)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(src[r0*cols:r1*cols], dst[r0*rowBytes:r1*rowBytes])
		}()
	}
	wg.Wait()
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
