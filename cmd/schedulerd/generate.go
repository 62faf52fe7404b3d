package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"os"
	"slices"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
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
	// Spec holds the speculative decoding flags (as schedulerd serve's).
	Spec specFlags
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
	}, append(c.CPU.flags(), c.Spec.flags()...)...)
}

// generateCommand runs the model on the device directly (no sockets, no scheduler): one prefill
// of the ids, then decode steps through the paged KV cache, printing one JSON object. With
// --speculative ngram the decode runs through the scheduler, which verifies the drafts.
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
			if err := cfg.Spec.check(); err != nil {
				return err
			}
			p := sampling.DefaultParams()
			p.Temperature, p.TopP, p.TopK = float32(cfg.Temperature), float32(cfg.TopP), cfg.TopK
			p.Seed = cfg.Seed
			if err := p.Validate(); err != nil {
				return err
			}
			res, err := generate(ctx, cfg.ModelPath, cfg.Device, cfg.Quantization, ids, cfg.MaxNewTokens, p, cfg.IgnoreEOS, cfg.PrintLogits,
				opts, cfg.Spec)
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
	// Seconds is the generation's wall time, prefill included, load excluded.
	Seconds float64 `json:"seconds"`
	// Steps, DraftTokens and AcceptedTokens are the scheduler's counts under --speculative
	// ngram: forward passes, draft tokens verified, drafts accepted.
	Steps          int `json:"steps,omitempty"`
	DraftTokens    int `json:"draft_tokens,omitempty"`
	AcceptedTokens int `json:"accepted_tokens,omitempty"`
}

func generate(ctx context.Context, path, device, quantization string, prompt []int32, maxNew int, p sampling.Params, ignoreEOS, printLogits bool, opts backend.Options, spec specFlags) (*generateResult, error) {
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
	start := time.Now()
	res := &generateResult{OutputIDs: []int32{}}
	if spec.Speculative == scheduler.SpeculativeNgram && !printLogits {
		if err := generateScheduled(ctx, b, prompt, maxNew, p, ignoreEOS, eos, total, spec, res); err != nil {
			return nil, err
		}
		res.Seconds = time.Since(start).Seconds()
		return res, nil
	}
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
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// generateScheduled runs the request through the scheduler (one request, one prefill chunk),
// which drafts and verifies as spec says.
func generateScheduled(ctx context.Context, b backend.Backend, prompt []int32, maxNew int, p sampling.Params, ignoreEOS bool, eos []int32, total int, spec specFlags, res *generateResult) error {
	if maxNew == 0 {
		return nil
	}
	s, err := scheduler.New(b, scheduler.Config{MaxRunning: 1, MaxPrefillTokens: max(len(prompt), 2048), EOS: eos, MaxModelLen: total,
		Speculative: spec.Speculative, MaxDraft: spec.MaxDraft})
	if err != nil {
		return err
	}
	if err := s.Add(&scheduler.Request{RID: "generate", InputIDs: prompt, MaxNewTokens: maxNew, IgnoreEOS: ignoreEOS, Sampling: p}); err != nil {
		return err
	}
	for s.HasWork() {
		out, err := s.Step(ctx)
		if err != nil {
			return err
		}
		for _, it := range out.Items {
			res.OutputIDs = append(res.OutputIDs, it.NewIDs...)
			if it.FinishReason == scheduler.FinishError {
				return fmt.Errorf("generate: %s", it.Err)
			}
		}
	}
	st := s.Stats()
	res.Steps, res.DraftTokens, res.AcceptedTokens = st.Steps, st.DraftTokens, st.AcceptedTokens
	return nil
}
