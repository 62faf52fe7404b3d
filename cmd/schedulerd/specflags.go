package main

import (
	"context"
	"fmt"

	"github.com/llmserve/llmserve/scheduler"
	"github.com/urfave/cli/v3"
)

// defaultSpeculative is --speculative's default: see the README's "Speculative decoding" for
// the measurements that chose it.
const defaultSpeculative = scheduler.SpeculativeNgram

// specFlags are the speculative decoding settings `schedulerd serve` and `generate` share.
type specFlags struct {
	// Speculative is ngram (prompt-lookup and grammar jump-forward drafts, verified in one
	// forward pass) or off.
	Speculative string
	// MaxDraft bounds one request's draft per step.
	MaxDraft int
	// set: --speculative (or SPECULATIVE) was given, not defaulted.
	set bool
}

func (c *specFlags) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "speculative", Destination: &c.Speculative, Value: defaultSpeculative, Sources: cli.EnvVars("SPECULATIVE"),
			Usage: "speculative decoding without a draft model: ngram (drafts from the request's own prompt and output, and from what a grammar forces, verified in one forward pass; outputs are unchanged) or off",
			Action: func(_ context.Context, _ *cli.Command, _ string) error {
				c.set = true
				return nil
			}},
		&cli.IntFlag{Name: "speculative-max-draft", Destination: &c.MaxDraft, Value: scheduler.DefaultMaxDraft, Sources: cli.EnvVars("SPECULATIVE_MAX_DRAFT"),
			Usage: fmt.Sprintf("with --speculative ngram: the most draft tokens of one request per step, 1-%d (each request adapts its own below it)", scheduler.MaxDraftLimit)},
	}
}

// check refuses values out of range, naming the flag.
func (c *specFlags) check() error {
	switch c.Speculative {
	case scheduler.SpeculativeNgram, scheduler.SpeculativeOff:
	default:
		return fmt.Errorf("--speculative %q: want ngram or off", c.Speculative)
	}
	if c.MaxDraft < 1 || c.MaxDraft > scheduler.MaxDraftLimit {
		return fmt.Errorf("--speculative-max-draft %d outside [1, %d]", c.MaxDraft, scheduler.MaxDraftLimit)
	}
	return nil
}
