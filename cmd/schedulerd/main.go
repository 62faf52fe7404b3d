// Command schedulerd runs one data-parallel rank on one device: `serve` is the engine process
// (continuous batching, KV cache, model forward, sampling); `generate` runs a model directly on
// given token ids, for smoke tests and scripts.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/internal/version"
	"github.com/urfave/cli/v3"
)

func main() {
	cmd := &cli.Command{
		Name:     "schedulerd",
		Usage:    "one data-parallel rank of the llmserve engine",
		Version:  version.String(),
		Commands: []*cli.Command{serveCommand(), generateCommand()},
	}
	if err := cmd.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "schedulerd:", err)
		os.Exit(runflags.ExitStatus(err))
	}
}
