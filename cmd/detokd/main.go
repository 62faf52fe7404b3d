// Command detokd is the engine's detokenizer process: it receives every rank's token-id
// batches, turns them into text deltas per request (stop strings trimmed), and forwards each
// worker the items it owns plus every rank's load.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

func main() {
	var cfg runflags.Config
	runflags.Main(&cli.Command{
		Name:      "detokd",
		Usage:     "incremental detokenization between the schedulers and the tokenizer workers",
		Flags:     cfg.Flags(),
		ArgsUsage: "[MODEL]",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := cfg.ModelArg(cmd); err != nil {
				return err
			}
			return run(ctx, &cfg)
		},
	})
}

// run serves detokd until ctx ends (SIGINT/SIGTERM).
func run(ctx context.Context, cfg *runflags.Config) error {
	log := cfg.Logger("detokd")
	runflags.SetStreamingGC()
	if err := cfg.Check(); err != nil {
		return runflags.AsConfig(err)
	}
	if cfg.SkipTokenizerInit || cfg.SkipDetokenization {
		return runflags.Configf("detokd is not used with --skip-tokenizer-init or --skip-detokenization")
	}
	dir, err := cfg.OpenRunDir()
	if err != nil {
		return err
	}
	if err := runflags.LockRunDir(dir, "detokd"); err != nil {
		return err
	}
	runflags.WatchRunDir(time.Second, log)
	tr, err := cfg.OpenTransport()
	if err != nil {
		return err
	}
	ipc.SetSecurityLogger(log)
	top, err := cfg.JoinPeers(dir, func(top *ipc.Topology) []string {
		eps := make([]string, cfg.TokenizerWorkerNum)
		for w := range eps {
			eps[w] = top.Worker(w, false)
		}
		return eps
	})
	if err != nil {
		return err
	}
	tok, err := tokenizer.Load(cfg.ModelPath)
	if err != nil {
		return runflags.AsConfig(err)
	}
	svc, err := newService(tr, top, tok, cfg.TokenizerWorkerNum, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); svc.Close() }()
	log.Info("detokd ready", "run_dir", dir, "input", top.Detok(true), "transport", tr.Name(), "workers", cfg.TokenizerWorkerNum)
	return svc.Run()
}
