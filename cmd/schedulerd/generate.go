package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/urfave/cli/v3"
)

// generateCommand runs the model on the device directly (no sockets, no scheduler): one prefill
// of the ids, then decode steps through the paged KV cache, printing one JSON object.
func generateCommand() *cli.Command {
	return &cli.Command{
		Name:  "generate",
		Usage: `run a model on token ids and print {"output_ids": [...], "last_logits": [...]}`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model-path", Value: "models/pico", Sources: cli.EnvVars("MODEL_PATH")},
			&cli.StringFlag{Name: "device", Value: "cpu", Sources: cli.EnvVars("DEVICE")},
			&cli.StringFlag{Name: "input-ids", Usage: "comma-separated prompt token ids", Required: true},
			&cli.IntFlag{Name: "max-new-tokens", Value: 16},
			&cli.FloatFlag{Name: "temperature", Value: 0},
			&cli.FloatFlag{Name: "top-p", Value: 1},
			&cli.IntFlag{Name: "top-k", Value: -1},
			&cli.Uint64Flag{Name: "seed"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "keep generating past the model's EOS ids"},
			&cli.BoolFlag{Name: "print-logits", Usage: "also print the logits at the last prompt position"},
			quantizationFlag(),
			kvCacheDTypeFlag(),
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			ids, err := parseIDs(cmd.String("input-ids"))
			if err != nil {
				return err
			}
			kvType, err := cpu.ParseKVDType(cmd.String("kv-cache-dtype"))
			if err != nil {
				return fmt.Errorf("--kv-cache-dtype: %w", err)
			}
			if cmd.Int("max-new-tokens") < 0 {
				return fmt.Errorf("--max-new-tokens must be >= 0")
			}
			p := sampling.DefaultParams()
			p.Temperature, p.TopP, p.TopK = float32(cmd.Float("temperature")), float32(cmd.Float("top-p")), int(cmd.Int("top-k"))
			if cmd.IsSet("seed") {
				s := cmd.Uint64("seed")
				p.Seed = &s
			}
			if err := p.Validate(); err != nil {
				return err
			}
			res, err := generate(ctx, cmd.String("model-path"), cmd.String("device"), cmd.String("quantization"), ids,
				int(cmd.Int("max-new-tokens")), p, cmd.Bool("ignore-eos"), cmd.Bool("print-logits"), kvType)
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

func generate(ctx context.Context, path, device, quantization string, prompt []int32, maxNew int, p sampling.Params, ignoreEOS, printLogits bool, kvType cpu.KVDType) (*generateResult, error) {
	if device != "cpu" {
		return nil, fmt.Errorf("device %q: generate runs on cpu in this build", device)
	}
	m, err := loadModel(path, quantization)
	if err != nil {
		return nil, err
	}
	total := len(prompt) + maxNew
	if total > m.Config.MaxPositions {
		return nil, fmt.Errorf("prompt (%d) + max-new-tokens (%d) exceeds the context length %d", len(prompt), maxNew, m.Config.MaxPositions)
	}
	b, err := cpu.New(m, cpu.Options{NumBlocks: total/cpu.DefaultBlockSize + 2, KVCacheDType: kvType})
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
		rows, err = b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{tok}, Pos: pos, BlockTable: table, Logits: true}}})
		if err != nil {
			return nil, err
		}
		pos++
	}
	return res, nil
}
