// Command schedulerd runs one data-parallel rank on one device: `serve` is the engine process
// (continuous batching, KV cache, model forward, sampling); `generate` runs a model directly on
// given token ids, for smoke tests and scripts; `quantize` writes a model as a quantized GGUF file.
package main

import (
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/urfave/cli/v3"
)

func main() {
	runflags.Main(&cli.Command{
		Name:     "schedulerd",
		Usage:    "one data-parallel rank of the llmserve engine",
		Commands: []*cli.Command{serveCommand(), generateCommand(), quantizeCommand()},
	})
}
