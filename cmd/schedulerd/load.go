package main

import (
	"fmt"
	"runtime/debug"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
	"github.com/urfave/cli/v3"
)

// quantizationFlag is --quantization, shared by serve and generate.
func quantizationFlag(dst *string) cli.Flag {
	return &cli.StringFlag{Name: "quantization", Destination: dst, Usage: "store the weights as q8_0, q4_k, q4_0 or q6_k (or f32, f16, bf16) at load, " +
		"with llama.cpp's reference quantizers; default: as the checkpoint stores them", Sources: cli.EnvVars("QUANTIZATION")}
}

// loadModel opens the model at path (a Hugging Face directory or a GGUF file) and, when
// quantization names a type, re-stores its matrices in it.
func loadModel(path, quantization string) (*model.Model, error) {
	var t quant.Type
	if quantization != "" {
		var err error
		if t, err = quant.ParseType(quantization); err != nil {
			return nil, fmt.Errorf("--quantization: %w", err)
		}
	}
	m, err := model.Open(path)
	if err != nil {
		return nil, err
	}
	if quantization != "" {
		if err := model.Quantize(m, t); err != nil {
			return nil, fmt.Errorf("--quantization %s: %w", quantization, err)
		}
		// The source matrices are garbage now, but the Go heap keeps their pages until the
		// scavenger returns them (minutes) and grows its goal from the peak: without this a
		// model quantized at load stays as resident as source and result together.
		debug.FreeOSMemory()
	}
	return m, nil
}
