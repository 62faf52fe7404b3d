// Command tokenizerd is the engine's front end: the HTTP API served by N tokenizer worker
// processes on one port (SO_REUSEPORT), each owning the requests it accepted. `serve` runs the
// supervisor (or, with --worker-index, one worker); `tokenize` is a stdin/stdout tokenizer.
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
		Name:     "tokenizerd",
		Usage:    "HTTP API and tokenizer workers of the llmserve engine",
		Version:  version.String(),
		Commands: []*cli.Command{serveCommand(), tokenizeCommand()},
	}
	if err := cmd.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "tokenizerd:", err)
		os.Exit(runflags.ExitStatus(err))
	}
}
