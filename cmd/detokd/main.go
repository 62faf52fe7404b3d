// Command detokd is the engine's detokenizer process: it receives every rank's token-id
// batches, turns them into text deltas per request (stop strings trimmed), and forwards each
// worker the items it owns plus every rank's load.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

func main() {
	cmd := &cli.Command{
		Name:  "detokd",
		Usage: "incremental detokenization between the schedulers and the tokenizer workers",
		Flags: runflags.Common(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			log := runflags.Logger(cmd, "detokd")
			if err := runflags.Check(cmd); err != nil {
				return err
			}
			if cmd.Bool("skip-tokenizer-init") || cmd.Bool("skip-detokenization") {
				return fmt.Errorf("detokd is not used with --skip-tokenizer-init or --skip-detokenization")
			}
			dir, err := runflags.RunDir(cmd)
			if err != nil {
				return err
			}
			tr, err := runflags.Transport(cmd)
			if err != nil {
				return err
			}
			tok, err := tokenizer.Load(cmd.String("model-path"))
			if err != nil {
				return err
			}
			svc, err := detok.NewService(tr, dir, tok, int(cmd.Int("tokenizer-worker-num")), log)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() { <-ctx.Done(); svc.Close() }()
			log.Info("detokd ready", "run_dir", dir, "transport", tr.Name(), "workers", cmd.Int("tokenizer-worker-num"))
			return svc.Run()
		},
	}
	if err := cmd.Run(context.Background(), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "detokd:", err)
		os.Exit(1)
	}
}
