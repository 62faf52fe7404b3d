// Command tokenizerd is the engine's front end: the HTTP API served by N tokenizer worker
// processes on one port (SO_REUSEPORT), each owning the requests it accepted. `serve` runs the
// supervisor (or, with --worker-index, one worker); `tokenize` is a stdin/stdout tokenizer.
package main

import (
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/urfave/cli/v3"
)

func main() {
	runflags.Main(&cli.Command{
		Name:     "tokenizerd",
		Usage:    "HTTP API and tokenizer workers of the llmserve engine",
		Commands: []*cli.Command{serveCommand(), tokenizeCommand()},
	})
}
