package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/runner"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

// serveCommand runs one data-parallel rank: its scheduler loop on its device, between the
// tokenizer workers and detokd.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run one data-parallel rank (scheduler, KV cache, model forward) on one device",
		Flags: append(runflags.Common(),
			&cli.StringFlag{Name: "device", Value: "cpu", Usage: "cpu, or cuda:K", Sources: cli.EnvVars("DEVICE")},
			&cli.IntFlag{Name: "dp-rank", Value: 0, Usage: "this process's data-parallel rank", Sources: cli.EnvVars("DP_RANK")},
			&cli.IntFlag{Name: "base-gpu-id", Value: 0, Usage: "with --device cuda, rank r uses GPU base-gpu-id + r", Sources: cli.EnvVars("BASE_GPU_ID")},
			&cli.IntFlag{Name: "max-running-requests", Value: 256, Usage: "requests admitted into the batch at once"},
			&cli.IntFlag{Name: "max-prefill-tokens", Value: 2048, Usage: "token budget of one step"},
			&cli.IntFlag{Name: "chunked-prefill-size", Value: 512, Usage: "largest prefill chunk of one request per step (0: the step budget)"},
			&cli.IntFlag{Name: "kv-cache-mb", Value: 256, Usage: "memory for the KV cache, MiB", Sources: cli.EnvVars("KV_CACHE_MB")},
			kvCacheDTypeFlag(),
			&cli.IntFlag{Name: "context-length", Usage: "context length (default: the model's max_position_embeddings)"},
			&cli.StringFlag{Name: "load-format", Value: "auto", Usage: "auto (the model's weights) or replay (BENCHMARK ONLY: deterministic tokens, no model math)", Sources: cli.EnvVars("LOAD_FORMAT")},
			&cli.DurationFlag{Name: "replay-step-time", Usage: "with --load-format replay: the least time of one step", Sources: cli.EnvVars("REPLAY_STEP_TIME")},
			&cli.IntFlag{Name: "replay-kv-tokens", Value: 4 << 20, Usage: "with --load-format replay: KV positions in the pool"},
			&cli.DurationFlag{Name: "heartbeat", Value: 200 * time.Millisecond, Usage: "longest silence towards the workers (load reports)"},
			quantizationFlag(),
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			rank := int(cmd.Int("dp-rank"))
			log := runflags.Logger(cmd, "schedulerd").With("rank", rank)
			if err := runflags.Check(cmd); err != nil {
				return err
			}
			if rank < 0 || rank >= int(cmd.Int("dp-size")) {
				return fmt.Errorf("--dp-rank %d out of range for --dp-size %d", rank, cmd.Int("dp-size"))
			}
			device, err := rankDevice(cmd.String("device"), int(cmd.Int("base-gpu-id")), rank)
			if err != nil {
				return err
			}
			dir, err := runflags.RunDir(cmd)
			if err != nil {
				return err
			}
			tr, err := runflags.Transport(cmd)
			if err != nil {
				return err
			}
			path := cmd.String("model-path")
			b, cfg, err := openRankBackend(cmd, path, device, log)
			if err != nil {
				return err
			}
			defer b.Close()
			maxLen := cfg.MaxPositions
			if n := int(cmd.Int("context-length")); n > 0 {
				maxLen = n
			}
			eos, _ := model.EOSTokenIDs(path, cfg) // an unreadable generation_config.json leaves config.json's
			sched, err := scheduler.New(b, scheduler.Config{
				MaxRunning: int(cmd.Int("max-running-requests")), TokenBudget: int(cmd.Int("max-prefill-tokens")),
				ChunkSize: int(cmd.Int("chunked-prefill-size")), EOS: eos, MaxModelLen: maxLen, Rank: rank,
			})
			if err != nil {
				return err
			}
			var tok *tokenizer.Tokenizer
			if !cmd.Bool("skip-tokenizer-init") {
				// Stop strings are matched here, where the tokens are made, so a stop ends the
				// request (and frees its KV) in the step that produced it.
				if tok, err = tokenizer.Load(path); err != nil {
					return err
				}
			}
			var grammars *runner.Grammars
			if tok != nil {
				gopts, err := runflags.GrammarOptions(cmd)
				if err != nil {
					return err
				}
				grammars = runner.NewGrammars(grammar.NewCompiler(tok, runflags.GrammarEOS(eos, tok), gopts))
			}
			r, err := runner.New(runner.Config{
				Rank: rank, NumWorkers: int(cmd.Int("tokenizer-worker-num")), RunDir: dir, Transport: tr,
				Direct: cmd.Bool("skip-detokenization") || cmd.Bool("skip-tokenizer-init"), Tokenizer: tok, Grammars: grammars,
				Heartbeat: cmd.Duration("heartbeat"), Log: log,
			}, sched)
			if err != nil {
				return err
			}
			defer r.Close()
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			log.Info("schedulerd ready", "device", device, "run_dir", dir, "transport", tr.Name(),
				"kv_blocks", b.NumBlocks(), "block_size", b.BlockSize(), "context_length", maxLen)
			return r.Run(ctx)
		},
	}
}

// rankDevice resolves the device a rank may use: cuda without an index means base-gpu-id+rank.
func rankDevice(device string, baseGPU, rank int) (string, error) {
	switch {
	case device == "cpu":
		return device, nil
	case device == "cuda":
		return "cuda:" + strconv.Itoa(baseGPU+rank), nil
	case strings.HasPrefix(device, "cuda:"):
		if _, err := strconv.Atoi(device[5:]); err != nil {
			return "", fmt.Errorf("--device %q: want cuda:K", device)
		}
		return device, nil
	}
	return "", fmt.Errorf("--device %q: want cpu, cuda or cuda:K", device)
}

// openRankBackend opens the model's backend, or the replay runner for pipeline benchmarks.
func openRankBackend(cmd *cli.Command, path, device string, log *slog.Logger) (backend.Backend, model.Config, error) {
	switch cmd.String("load-format") {
	case "auto":
		kvType, err := cpu.ParseKVDType(cmd.String("kv-cache-dtype"))
		if err != nil {
			return nil, model.Config{}, fmt.Errorf("--kv-cache-dtype: %w", err)
		}
		return openBackend(path, device, cmd.String("quantization"), int64(cmd.Int("kv-cache-mb"))<<20, kvType, log)
	case "replay":
		cfg, err := model.LoadConfig(path)
		if err != nil {
			return nil, model.Config{}, err
		}
		const blockSize = 16
		r, err := replay.New(replay.Options{VocabSize: cfg.VocabSize, BlockSize: blockSize,
			NumBlocks: max(1, int(cmd.Int("replay-kv-tokens"))/blockSize), StepTime: cmd.Duration("replay-step-time")})
		if err != nil {
			return nil, model.Config{}, err
		}
		log.Warn("replay runner: BENCHMARK ONLY, outputs are deterministic token sequences, not the model's",
			"vocab", cfg.VocabSize, "step_time", cmd.Duration("replay-step-time"))
		return r, cfg, nil
	}
	return nil, model.Config{}, fmt.Errorf("--load-format %q: want auto or replay", cmd.String("load-format"))
}
