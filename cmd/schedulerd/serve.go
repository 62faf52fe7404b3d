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
	"github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/runner"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

// rankConfig is `schedulerd serve`'s settings. Each field is its flag's name in CamelCase.
type rankConfig struct {
	runflags.Config
	// Device is cpu, cuda or cuda:K.
	Device string
	// DPRank is this process's data-parallel rank.
	DPRank int
	// BaseGPUID: with --device cuda, rank r uses GPU BaseGPUID + r.
	BaseGPUID int
	// MaxRunningRequests bounds the requests admitted into the batch at once.
	MaxRunningRequests int
	// MaxPrefillTokens is the token budget of one step (scheduler.Config.MaxPrefillTokens).
	MaxPrefillTokens int
	// ChunkedPrefillSize is the largest prefill chunk of one request per step (0: the budget).
	ChunkedPrefillSize int
	// KVCacheMB is the memory for the KV cache, MiB.
	KVCacheMB int
	// KVCacheFraction, when > 0, sizes the KV cache instead: this share of the memory available
	// once the weights are loaded.
	KVCacheFraction float64
	// KVCacheDType is the KV cache element type: auto (the weights' type), bf16, f16 or f32.
	KVCacheDType string
	// Quantization re-stores the weights in this type at load ("": as the checkpoint stores them).
	Quantization string
	// CPU holds the CPU backend's own flags.
	CPU cpuFlags
	// Spec holds the speculative decoding flags.
	Spec specFlags
	// GrammarCanonicalLiterals: where a grammar forces a literal, the token mask admits only
	// the tokenizer's own spelling of it (runner.Grammars.SetCanonicalLiterals).
	GrammarCanonicalLiterals bool
	// ContextLength overrides the model's max_position_embeddings when > 0.
	ContextLength int
	// LoadFormat is auto (the model's weights) or replay (benchmark only).
	LoadFormat string
	// ReplayStepTime is the least time of one replay step.
	ReplayStepTime time.Duration
	// ReplayTokenTime is added to a replay step per token it computes.
	ReplayTokenTime time.Duration
	// ReplayKVTokens is the KV positions of the replay runner's pool.
	ReplayKVTokens int
	// Heartbeat is the longest silence towards the workers.
	Heartbeat time.Duration
	// KVEventsEndpoint, when set, is where the rank publishes its KV-cache events in vLLM's
	// format (ZMQ PUB; rank r adds r to the port); KVEventsReplayEndpoint the replay ROUTER's.
	KVEventsEndpoint, KVEventsReplayEndpoint string
	// KVEventsTopic is the events' topic frame.
	KVEventsTopic string
	// KVEventsHashSeed seeds the events' block hashes as PYTHONHASHSEED seeds vLLM's.
	KVEventsHashSeed string
	// DPRankSet: --dp-rank (or DP_RANK) was given; else a LeaderWorkerSet pod's index names it.
	DPRankSet bool
}

func (c *rankConfig) flags() []cli.Flag {
	return append(append(c.Config.Flags(),
		&cli.StringFlag{Name: "device", Destination: &c.Device, Value: "cpu", Usage: "cpu, or cuda:K", Sources: cli.EnvVars("DEVICE")},
		&cli.IntFlag{Name: "dp-rank", Destination: &c.DPRank, Value: 0, Usage: "this process's data-parallel rank", Sources: cli.EnvVars("DP_RANK")},
		&cli.IntFlag{Name: "base-gpu-id", Destination: &c.BaseGPUID, Value: 0, Usage: "with --device cuda, rank r uses GPU base-gpu-id + r", Sources: cli.EnvVars("BASE_GPU_ID")},
		&cli.IntFlag{Name: "max-running-requests", Destination: &c.MaxRunningRequests, Value: 256, Usage: "requests admitted into the batch at once", Sources: cli.EnvVars("MAX_RUNNING_REQUESTS")},
		&cli.IntFlag{Name: "max-prefill-tokens", Destination: &c.MaxPrefillTokens, Value: 2048, Usage: "token budget of one step", Sources: cli.EnvVars("MAX_PREFILL_TOKENS")},
		&cli.IntFlag{Name: "chunked-prefill-size", Destination: &c.ChunkedPrefillSize, Value: 512, Usage: "largest prefill chunk of one request per step (0: the step budget)", Sources: cli.EnvVars("CHUNKED_PREFILL_SIZE")},
		&cli.IntFlag{Name: "kv-cache-mb", Destination: &c.KVCacheMB, Value: 256, Usage: "memory for the KV cache, MiB", Sources: cli.EnvVars("KV_CACHE_MB")},
		&cli.FloatFlag{Name: "kv-cache-fraction", Destination: &c.KVCacheFraction, Usage: "when > 0, size the KV cache as this share (0-1] of the device memory available once the weights are loaded (on cpu: MemAvailable), instead of --kv-cache-mb", Sources: cli.EnvVars("KV_CACHE_FRACTION")},
		kvCacheDTypeFlag(&c.KVCacheDType),
		quantizationFlag(&c.Quantization),
		&cli.IntFlag{Name: "context-length", Destination: &c.ContextLength, Usage: "context length (default: the model's max_position_embeddings)", Sources: cli.EnvVars("CONTEXT_LENGTH")},
		&cli.StringFlag{Name: "load-format", Destination: &c.LoadFormat, Value: "auto", Usage: "auto (the model's weights) or replay (BENCHMARK ONLY: deterministic tokens, no model math)", Sources: cli.EnvVars("LOAD_FORMAT")},
		&cli.DurationFlag{Name: "replay-step-time", Destination: &c.ReplayStepTime, Usage: "with --load-format replay: the least time of one step", Sources: cli.EnvVars("REPLAY_STEP_TIME")},
		&cli.DurationFlag{Name: "replay-token-time", Destination: &c.ReplayTokenTime, Usage: "with --load-format replay: time added to a step per token it computes (prefill cost)", Sources: cli.EnvVars("REPLAY_TOKEN_TIME")},
		&cli.IntFlag{Name: "replay-kv-tokens", Destination: &c.ReplayKVTokens, Value: 4 << 20, Usage: "with --load-format replay: KV positions in the pool", Sources: cli.EnvVars("REPLAY_KV_TOKENS")},
		&cli.BoolFlag{Name: "grammar-canonical-literals", Destination: &c.GrammarCanonicalLiterals, Value: true, Sources: cli.EnvVars("GRAMMAR_CANONICAL_LITERALS"),
			Usage: "where a structured-output grammar admits exactly one continuation (a property name, the rest of an enum value), its token mask admits only the tokenizer's own spelling of it, not every split (its drafts under --speculative ngram are then always accepted); false: every token the grammar allows"},
		&cli.DurationFlag{Name: "heartbeat", Destination: &c.Heartbeat, Value: 200 * time.Millisecond, Usage: "longest silence towards the workers (load reports)", Sources: cli.EnvVars("HEARTBEAT")},
		&cli.StringFlag{Name: "kv-events-endpoint", Destination: &c.KVEventsEndpoint, Sources: cli.EnvVars("KV_EVENTS_ENDPOINT"),
			Usage: "publish KV-cache events in vLLM's format on this ZMQ PUB endpoint (tcp://*:5557 binds, tcp://host:port connects; rank r adds r to the port); off when empty"},
		&cli.StringFlag{Name: "kv-events-replay-endpoint", Destination: &c.KVEventsReplayEndpoint, Sources: cli.EnvVars("KV_EVENTS_REPLAY_ENDPOINT"),
			Usage: "with --kv-events-endpoint: bind a ROUTER here that resends missed batches (rank r adds r to the port)"},
		&cli.StringFlag{Name: "kv-events-topic", Destination: &c.KVEventsTopic, Sources: cli.EnvVars("KV_EVENTS_TOPIC"),
			Usage: "topic frame of the KV events (llm-d's indexer reads kv@POD@MODEL)"},
		&cli.StringFlag{Name: "kv-events-hash-seed", Destination: &c.KVEventsHashSeed, Sources: cli.EnvVars("PYTHONHASHSEED"),
			Usage: "seed of the events' block hashes, as PYTHONHASHSEED seeds vLLM's (default: vLLM's, \"" + scheduler.DefaultKVHashSeed + "\")"},
	), append(c.CPU.flags(), c.Spec.flags()...)...)
}

// serveCommand runs one data-parallel rank: its scheduler loop on its device, between the
// tokenizer workers and detokd.
func serveCommand() *cli.Command {
	var cfg rankConfig
	return &cli.Command{
		Name:      "serve",
		Usage:     "run one data-parallel rank (scheduler, KV cache, model forward) on one device",
		Flags:     cfg.flags(),
		ArgsUsage: "[MODEL]",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := cfg.ModelArg(cmd); err != nil {
				return err
			}
			cfg.DPRankSet = cmd.IsSet("dp-rank")
			return serveRank(ctx, &cfg)
		},
	}
}

// serveRank runs the rank until ctx ends (SIGINT/SIGTERM).
func serveRank(ctx context.Context, cfg *rankConfig) error {
	if r, ok, err := runflags.LWSRank(); err != nil {
		return err
	} else if ok && !cfg.DPRankSet {
		cfg.DPRank = r
	}
	rank := cfg.DPRank
	base := cfg.Logger("schedulerd")
	log := base.With("rank", rank)
	if err := cfg.Check(); err != nil {
		return runflags.AsConfig(err)
	}
	if err := cfg.Spec.check(); err != nil {
		return runflags.AsConfig(err)
	}
	if cfg.LoadFormat == "replay" && cfg.Spec.Speculative != scheduler.SpeculativeOff {
		// The replay runner returns no logits rows to verify drafts with.
		if cfg.Spec.set {
			return runflags.Configf("--speculative %s needs the model's logits; --load-format replay has none (use --speculative off)", cfg.Spec.Speculative)
		}
		cfg.Spec.Speculative = scheduler.SpeculativeOff
	}
	if rank < 0 || rank >= cfg.DPSize {
		return runflags.Configf("--dp-rank %d out of range for --dp-size %d", rank, cfg.DPSize)
	}
	device, err := rankDevice(cfg.Device, cfg.BaseGPUID, rank)
	if err != nil {
		return runflags.AsConfig(err)
	}
	dir, err := cfg.OpenRunDir()
	if err != nil {
		return err
	}
	if err := runflags.LockRunDir(dir, fmt.Sprintf("schedulerd-%d", rank)); err != nil {
		return err
	}
	runflags.WatchRunDir(time.Second, log)
	tr, err := cfg.OpenTransport()
	if err != nil {
		return err
	}
	ipc.SetSecurityLogger(log)
	direct := cfg.SkipDetokenization || cfg.SkipTokenizerInit
	top, err := cfg.JoinPeers(dir, func(top *ipc.Topology) []string {
		return runner.OutputEndpoints(top, direct, cfg.TokenizerWorkerNum)
	})
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	path := cfg.ModelPath
	b, mcfg, err := openRankBackend(cfg, device, log)
	if err != nil {
		// The model path, its format, the device, the quantization or KV cache type, a KV
		// cache that does not fit: nothing a restart changes.
		return runflags.AsConfig(err)
	}
	defer b.Close()
	maxLen := mcfg.MaxPositions
	if cfg.ContextLength > 0 {
		maxLen = cfg.ContextLength
	}
	if err := checkContextFits(maxLen, cfg.ContextLength > 0, b.NumBlocks(), b.BlockSize(), cfg); err != nil {
		return err
	}
	eos, _ := model.EOSTokenIDs(path, mcfg) // an unreadable generation_config.json leaves config.json's
	sched, err := scheduler.New(b, scheduler.Config{
		MaxRunning: cfg.MaxRunningRequests, MaxPrefillTokens: cfg.MaxPrefillTokens,
		ChunkSize: cfg.ChunkedPrefillSize, EOS: eos, MaxModelLen: maxLen, Rank: rank, Policy: cfg.SchedulingPolicy,
		KVEvents: cfg.KVEventsEndpoint != "", KVHashSeed: cfg.KVEventsHashSeed,
		Speculative: cfg.Spec.Speculative, MaxDraft: cfg.Spec.MaxDraft,
	})
	if err != nil {
		return runflags.AsConfig(err) // the batch and prefill limits
	}
	kvPub, err := openKVEvents(cfg, rank, log)
	if err != nil {
		return err
	}
	var kvSink runner.KVEventSink
	if kvPub != nil {
		defer kvPub.Close()
		kvSink = kvPub
	}
	var tok *tokenizer.Tokenizer
	if !cfg.SkipTokenizerInit {
		// Stop strings are matched here, where the tokens are made, so a stop ends the
		// request (and frees its KV) in the step that produced it.
		if tok, err = tokenizer.Load(path); err != nil {
			return runflags.AsConfig(err)
		}
	}
	var grammars *runner.Grammars
	if tok != nil {
		gopts, err := cfg.GrammarOptions()
		if err != nil {
			return runflags.AsConfig(err)
		}
		grammars = runner.NewGrammars(grammar.NewCompiler(tok, model.ConstraintEOS(eos, tok), gopts))
		grammars.SetCanonicalLiterals(cfg.GrammarCanonicalLiterals)
	}
	r, err := runner.New(runner.Config{
		Rank: rank, NumWorkers: cfg.TokenizerWorkerNum, RunDir: dir, Topology: top, Transport: tr,
		Direct: direct, Tokenizer: tok, Grammars: grammars,
		Heartbeat: cfg.Heartbeat, Log: base, // the runner tags its lines with the rank itself
		KVEvents: kvSink, KVBlockSize: b.BlockSize(),
	}, sched)
	if err != nil {
		return err
	}
	defer r.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("schedulerd ready", "device", device, "run_dir", dir, "input", top.Scheduler(rank, true), "transport", tr.Name(),
		"kv_blocks", b.NumBlocks(), "block_size", b.BlockSize(), "context_length", maxLen)
	return r.Run(ctx)
}

// openKVEvents opens the rank's KV event publisher, or returns nil when events are off.
func openKVEvents(cfg *rankConfig, rank int, log *slog.Logger) (*ipc.KVEventPublisher, error) {
	if cfg.KVEventsEndpoint == "" {
		if cfg.KVEventsReplayEndpoint != "" {
			return nil, fmt.Errorf("--kv-events-replay-endpoint needs --kv-events-endpoint")
		}
		return nil, nil
	}
	ep, err := ipc.KVEventsEndpointForRank(cfg.KVEventsEndpoint, rank)
	if err != nil {
		return nil, fmt.Errorf("--kv-events-endpoint: %w", err)
	}
	replay := ""
	if cfg.KVEventsReplayEndpoint != "" {
		if replay, err = ipc.KVEventsEndpointForRank(cfg.KVEventsReplayEndpoint, rank); err != nil {
			return nil, fmt.Errorf("--kv-events-replay-endpoint: %w", err)
		}
	}
	p, err := ipc.NewKVEventPublisher(ipc.KVPublisherConfig{Endpoint: ep, ReplayEndpoint: replay, Topic: cfg.KVEventsTopic, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("publishing KV events", "endpoint", ep, "replay_endpoint", replay, "topic", cfg.KVEventsTopic)
	return p, nil
}

// rankDevice resolves the device a rank uses: a kind without an index (cuda) means index
// base-gpu-id+rank; cpu is the one CPU. Whether the kind is built in is the registry's to say.
func rankDevice(device string, baseGPU, rank int) (string, error) {
	kind, idx, err := backend.ParseDevice(device)
	if err != nil {
		return "", fmt.Errorf("--device: %w", err)
	}
	if kind == "cpu" {
		return "cpu", nil
	}
	if !strings.Contains(device, ":") {
		idx = baseGPU + rank
	}
	return kind + ":" + strconv.Itoa(idx), nil
}

// openRankBackend opens the model's backend, or the replay runner for pipeline benchmarks.
func openRankBackend(cfg *rankConfig, device string, log *slog.Logger) (backend.Backend, model.Config, error) {
	switch cfg.LoadFormat {
	case "auto":
		opts, err := kvOptions(cfg.KVCacheDType, cfg.KVCacheMB, cfg.KVCacheFraction)
		if err != nil {
			return nil, model.Config{}, err
		}
		opts.Tuning = cfg.CPU.tuning(device)
		return openBackend(cfg.ModelPath, device, cfg.Quantization, opts, log)
	case "replay":
		mcfg, err := model.LoadConfig(cfg.ModelPath)
		if err != nil {
			return nil, model.Config{}, err
		}
		const blockSize = 16
		r, err := backend.Open("replay", &model.Model{Config: mcfg}, backend.Options{BlockSize: blockSize,
			NumBlocks: max(1, cfg.ReplayKVTokens/blockSize), Tuning: replay.Tuning{StepTime: cfg.ReplayStepTime, TokenTime: cfg.ReplayTokenTime}})
		if err != nil {
			return nil, model.Config{}, err
		}
		log.Warn("replay runner: BENCHMARK ONLY, outputs are deterministic token sequences, not the model's",
			"vocab", mcfg.VocabSize, "step_time", cfg.ReplayStepTime)
		return r, mcfg, nil
	}
	return nil, model.Config{}, fmt.Errorf("--load-format %q: want auto or replay", cfg.LoadFormat)
}

// checkContextFits refuses to start a rank whose context length its KV cache cannot hold, as
// vLLM does: one request of the full context could never run, and the API would advertise a
// max_model_len the engine cannot serve. The message names both numbers and the settings that
// fix it.
func checkContextFits(maxLen int, explicit bool, blocks, blockSize int, cfg *rankConfig) error {
	capacity := blocks * blockSize
	if maxLen <= capacity {
		return nil
	}
	what := "the model's context length (max_position_embeddings)"
	if explicit {
		what = "--context-length"
	}
	if cfg.KVCacheFraction > 0 {
		return runflags.Configf("%s is %d tokens, but the KV cache (--kv-cache-fraction %g) holds only %d; "+
			"raise --kv-cache-fraction (KV_CACHE_FRACTION), or lower --context-length to %d or less (CONTEXT_LENGTH)",
			what, maxLen, cfg.KVCacheFraction, capacity, capacity)
	}
	perToken := float64(cfg.KVCacheMB) / float64(max(capacity, 1)) // MiB per position
	return runflags.Configf("%s is %d tokens, but the KV cache (--kv-cache-mb %d) holds only %d; "+
		"raise --kv-cache-mb to at least %d (KV_CACHE_MB) or size it with --kv-cache-fraction (KV_CACHE_FRACTION), "+
		"or lower --context-length to %d or less (CONTEXT_LENGTH)",
		what, maxLen, cfg.KVCacheMB, capacity, int(perToken*float64(maxLen))+1, capacity)
}
