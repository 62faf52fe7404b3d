package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"os"
	"slices"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/urfave/cli/v3"
)

// generateConfig is `schedulerd generate`'s settings. Each field is its flag's name in CamelCase.
type generateConfig struct {
	// ModelPath is the Hugging Face model directory.
	ModelPath string
	// Device is where the model runs (cpu in this build).
	Device string
	// InputIDs is the comma-separated prompt token ids.
	InputIDs string
	// MaxNewTokens bounds the generated tokens.
	MaxNewTokens int
	// Temperature, TopP, TopK and Seed are the sampling parameters; Seed is nil when unset.
	Temperature float64
	TopP        float64
	TopK        int
	Seed        *uint64
	// IgnoreEOS keeps generating past the model's EOS ids.
	IgnoreEOS bool
	// PrintLogits also prints the logits at the last prompt position.
	PrintLogits bool
	// KVCacheDType is the KV cache element type (as schedulerd serve's).
	KVCacheDType string
	// Quantization re-stores the weights in this type at load (as schedulerd serve's).
	Quantization string
	// CPU holds the CPU backend's own flags (as schedulerd serve's).
	CPU cpuFlags
}

func (c *generateConfig) flags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "model-path", Destination: &c.ModelPath, Value: "models/pico", Sources: cli.EnvVars("MODEL_PATH")},
		&cli.StringFlag{Name: "device", Destination: &c.Device, Value: "cpu", Sources: cli.EnvVars("DEVICE")},
		&cli.StringFlag{Name: "input-ids", Destination: &c.InputIDs, Usage: "comma-separated prompt token ids", Required: true},
		&cli.IntFlag{Name: "max-new-tokens", Destination: &c.MaxNewTokens, Value: 16},
		&cli.FloatFlag{Name: "temperature", Destination: &c.Temperature, Value: 0},
		&cli.FloatFlag{Name: "top-p", Destination: &c.TopP, Value: 1},
		&cli.IntFlag{Name: "top-k", Destination: &c.TopK, Value: -1},
		&cli.Uint64Flag{Name: "seed", Action: func(_ context.Context, _ *cli.Command, v uint64) error {
			c.Seed = &v
			return nil
		}},
		&cli.BoolFlag{Name: "ignore-eos", Destination: &c.IgnoreEOS, Usage: "keep generating past the model's EOS ids"},
		&cli.BoolFlag{Name: "print-logits", Destination: &c.PrintLogits, Usage: "also print the logits at the last prompt position"},
		kvCacheDTypeFlag(&c.KVCacheDType),
		quantizationFlag(&c.Quantization),
	}, c.CPU.flags()...)
}

// generateCommand runs the model on the device directly (no sockets, no scheduler): one prefill
// of the ids, then decode steps through the paged KV cache, printing one JSON object.
func generateCommand() *cli.Command {
	var cfg generateConfig
	return &cli.Command{
		Name:  "generate",
		Usage: `run a model on token ids and print {"output_ids": [...], "last_logits": [...]}`,
		Flags: cfg.flags(),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := runflags.NoArgs(cmd); err != nil {
				return err
			}
			ids, err := parseIDs(cfg.InputIDs)
			if err != nil {
				return err
			}
			opts, err := kvOptions(cfg.KVCacheDType, 0, 0)
			if err != nil {
				return err
			}
			opts.Tuning = cfg.CPU.tuning(cfg.Device)
			if cfg.MaxNewTokens < 0 {
				return fmt.Errorf("--max-new-tokens must be >= 0")
			}
			p := sampling.DefaultParams()
			p.Temperature, p.TopP, p.TopK = float32(cfg.Temperature), float32(cfg.TopP), cfg.TopK
			p.Seed = cfg.Seed
			if err := p.Validate(); err != nil {
				return err
			}
			res, err := generate(ctx, cfg.ModelPath, cfg.Device, cfg.Quantization, ids, cfg.MaxNewTokens, p, cfg.IgnoreEOS, cfg.PrintLogits,
				opts)
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(res)
		},
	}
}

type generateResult struct {
	OutputIDs  []int32   `json:"output_ids"`
	LastLogits []float32 `json:"last_logits,omitempty"`
}

func generate(ctx context.Context, path, device, quantization string, prompt []int32, maxNew int, p sampling.Params, ignoreEOS, printLogits bool, opts backend.Options) (*generateResult, error) {
	kind, _, err := backend.ParseDevice(device)
	if err != nil {
		return nil, err
	}
	if _, err := backend.Lookup(kind); err != nil {
		return nil, err
	}
	m, err := loadModel(path, quantization)
	if err != nil {
		return nil, err
	}
	total := len(prompt) + maxNew
	if total > m.Config.MaxPositions {
		return nil, fmt.Errorf("prompt (%d) + max-new-tokens (%d) exceeds the context length %d", len(prompt), maxNew, m.Config.MaxPositions)
	}
	bs := opts.BlockSize
	if bs == 0 {
		bs = 16
		opts.BlockSize = bs
	}
	opts.NumBlocks = total/bs + 2
	b, err := backend.Open(device, m, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	table := make([]int32, (total+b.BlockSize()-1)/b.BlockSize()+1)
	for i := range table {
		table[i] = int32(i)
	}
	eos, err := model.EOSTokenIDs(path, m.Config)
	if err != nil {
		return nil, err
	}
	res := &generateResult{OutputIDs: []int32{}}
	rows, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: prompt, Pos: 0, BlockTable: table, Logits: true}}})
	if err != nil {
		return nil, err
	}
	if printLogits {
		res.LastLogits = slices.Clone(rows[0])
	}
	s := sampling.New(p, prompt)
	pos := len(prompt)
	for len(res.OutputIDs) < maxNew {
		tok := s.Sample(rows[0], nil)
		s.Accept(tok)
		res.OutputIDs = append(res.OutputIDs, tok)
		if !ignoreEOS && slices.Contains(eos, tok) || len(res.OutputIDs) == maxNew {
			break
		}
		rows, err = b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{tok}, Pos: pos, BlockTable: table, Logits: true, Generated: true}}})
		if err != nil {
			return nil, err
		}
		pos++
	}
	return res, nil
}
