package model

import (
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/llmserve/llmserve/quant"
)

// quantizeChunkRows bounds the float32 rows widened at a time per worker (the vocabulary matrix
// alone would be 600 MB as float32 for a 150k x 1024 model).
const quantizeChunkRows = 256

// Quantize stores every matrix of m (projections, embeddings, LM head) as type t with
// llama.cpp's reference quantizers, as `--quantization` asks at load. A matrix whose rows are not
// a whole number of t's blocks falls back to Q8_0 where its rows allow that, and otherwise keeps
// its type; each fallback is logged. Progress is logged per layer.
func Quantize(m *Model, t quant.Type) error {
	if !t.Known() {
		return fmt.Errorf("quantize: unknown type %s", t)
	}
	start := time.Now()
	kept := false // some matrix kept its data, which may view a mapped file
	conv := func(name string, mat *Matrix) error {
		target := t
		if mat.Cols%t.BlockSize() != 0 {
			target = quant.Q8_0
			if mat.Cols%target.BlockSize() != 0 {
				target = mat.Type
			}
			slog.Warn("quantize: rows are not whole blocks; using another type", "matrix", name,
				"cols", mat.Cols, "want", t, "using", target)
		}
		if len(mat.Parts) > 0 {
			// a group of mixed types becomes one matrix of the target type again
			data := make([]byte, 0, mat.Rows*len(mat.Parts[0].Data)/max(mat.Parts[0].Rows, 1))
			for _, p := range mat.Parts {
				if p.Type != target {
					var err error
					if p, err = convertMatrix(p, target); err != nil {
						return fmt.Errorf("quantize %s: %w", name, err)
					}
				}
				data = append(data, p.Data...)
			}
			out, err := NewMatrix(target, mat.Rows, mat.Cols, data)
			if err != nil {
				return fmt.Errorf("quantize %s: %w", name, err)
			}
			*mat = out
			return nil
		}
		if mat.Type == target {
			kept = true
			return nil
		}
		out, err := convertMatrix(*mat, target)
		if err != nil {
			return fmt.Errorf("quantize %s: %w", name, err)
		}
		*mat = out
		return nil
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, x := range []struct {
			name string
			mat  *Matrix
		}{{"qkv", &l.QKV}, {"o_proj", &l.O}, {"gate_up", &l.GateUp}, {"down_proj", &l.Down}} {
			if err := conv(fmt.Sprintf("layer %d %s", i, x.name), x.mat); err != nil {
				return err
			}
		}
		slog.Info("quantizing", "type", t, "layer", i+1, "layers", len(m.Layers), "elapsed", time.Since(start).Round(time.Millisecond))
	}
	if err := conv("embed_tokens", &m.Embed); err != nil {
		return err
	}
	if !m.Config.TieWordEmbeddings {
		if err := conv("lm_head", &m.LMHead); err != nil {
			return err
		}
	}
	m.finishViews()
	if !kept {
		// No matrix views the safetensors mappings any more: unmap them, or the source
		// weights stay resident beside the quantized ones.
		for _, f := range m.files {
			if err := f.Close(); err != nil {
				return fmt.Errorf("quantize: release the source weights: %w", err)
			}
		}
		m.files = nil
	}
	slog.Info("quantized model", "type", t, "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// convertMatrix re-stores src as type t, rows in parallel chunks.
func convertMatrix(src Matrix, t quant.Type) (Matrix, error) {
	rb, err := t.RowBytes(src.Cols)
	if err != nil {
		return Matrix{}, err
	}
	dst := Matrix{Type: t, Rows: src.Rows, Cols: src.Cols, Data: make([]byte, src.Rows*rb)}
	chunks := (src.Rows + quantizeChunkRows - 1) / quantizeChunkRows
	var wg sync.WaitGroup
	var mu sync.Mutex // guards firstErr
	var firstErr error
	next := make(chan int, chunks)
	for c := range chunks {
		next <- c
	}
	close(next)
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]float32, quantizeChunkRows*src.Cols)
			for c := range next {
				r0, r1 := c*quantizeChunkRows, min(src.Rows, (c+1)*quantizeChunkRows)
				f := buf[:(r1-r0)*src.Cols]
				err := quant.Dequantize(src.Type, RowRange(src, r0, r1).Data, f)
				var q []byte
				if err == nil {
					q, err = quant.Quantize(t, f, src.Cols)
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					continue
				}
				copy(dst.Data[r0*rb:r1*rb], q)
			}
		}()
	}
	wg.Wait()
	return dst, firstErr
}
