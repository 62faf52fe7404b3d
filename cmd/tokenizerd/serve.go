package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/cmd/internal/supervise"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/internal/version"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/llmserve/llmserve/worker"
	"github.com/urfave/cli/v3"
)

// serveConfig is `tokenizerd serve`'s settings. Each field is its flag's name in CamelCase.
type serveConfig struct {
	runflags.Config
	// Host is the HTTP listen address.
	Host string
	// ServedModelName is the model id in the API ("" for the model directory's name).
	ServedModelName string
	// ContextLength overrides the model's max_position_embeddings when > 0.
	ContextLength int
	// StreamInterval is the server default of tokens per streamed chunk after the first.
	StreamInterval int
	// LoadBalanceMethod is round_robin, shortest_queue or minimum_tokens.
	LoadBalanceMethod string
	// RankTimeout is how long a rank may be silent before it is marked down.
	RankTimeout time.Duration
	// MaxQueuedRequests bounds the requests one worker holds in flight.
	MaxQueuedRequests int
	// WorkerThreads is GOMAXPROCS per worker process (0: computed; see workerThreads).
	WorkerThreads int
	// WorkerIndex is this process's worker index, or -1 for the supervisor.
	WorkerIndex int
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// APIKey, when set, is a key every request must carry (Authorization: Bearer KEY).
	APIKey string
	// APIKeyFile names a file of keys, one per line ('#' starts a comment), each accepted.
	APIKeyFile string
	// OpenPaths need no key even when keys are set.
	OpenPaths []string
	// ReadHeaderTimeout, ReadBodyTimeout, WriteTimeout and IdleTimeout bound how long a client
	// may take to send a request's headers and body, to take each write, and to stay idle
	// between requests.
	ReadHeaderTimeout time.Duration
	ReadBodyTimeout   time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxConnections bounds a worker's open connections (0: its descriptor limit less a reserve).
	MaxConnections int
	// ShutdownTimeout is how long a stopping worker lets requests in flight finish before it
	// ends them.
	ShutdownTimeout time.Duration
	// DrainDelay is how long a worker keeps serving after SIGTERM with /health at 503, before
	// it stops accepting (readiness propagation).
	DrainDelay time.Duration
	// ToolCallParser is the tool-call syntax: auto (from the chat template), hermes,
	// llama3_json or fallback.
	ToolCallParser string
	// ReasoningParser reads thinking blocks: auto (from the chat template), none, qwen3 or
	// deepseek_r1.
	ReasoningParser string
	// Pooling is /v1/embeddings' pooling: auto (the model directory's sentence-transformers
	// config, else last), last, mean or cls.
	Pooling string
}

func (c *serveConfig) flags() []cli.Flag {
	return append(c.Config.Flags(),
		&cli.StringFlag{Name: "host", Destination: &c.Host, Value: "127.0.0.1", Usage: "HTTP listen address", Sources: cli.EnvVars("HOST")},
		&cli.StringFlag{Name: "served-model-name", Destination: &c.ServedModelName, Usage: "model id in the API (default: the model directory's name)", Sources: cli.EnvVars("SERVED_MODEL_NAME")},
		&cli.IntFlag{Name: "context-length", Destination: &c.ContextLength, Usage: "context length (default: the model's max_position_embeddings)", Sources: cli.EnvVars("CONTEXT_LENGTH")},
		&cli.IntFlag{Name: "stream-interval", Destination: &c.StreamInterval, Value: 1, Usage: "tokens per streamed chunk after the first (server default)", Sources: cli.EnvVars("STREAM_INTERVAL")},
		&cli.StringFlag{Name: "load-balance-method", Destination: &c.LoadBalanceMethod, Value: "shortest_queue", Usage: "round_robin, shortest_queue, minimum_tokens or cache_aware (the rank already sent the longest prefix of the prompt, within a load bound)", Sources: cli.EnvVars("LOAD_BALANCE_METHOD")},
		&cli.DurationFlag{Name: "rank-timeout", Destination: &c.RankTimeout, Value: time.Second, Usage: "a rank silent this long is marked down and its requests fail", Sources: cli.EnvVars("RANK_TIMEOUT")},
		&cli.IntFlag{Name: "max-queued-requests", Destination: &c.MaxQueuedRequests, Value: 65536, Usage: "requests one worker holds in flight; more get 503", Sources: cli.EnvVars("MAX_QUEUED_REQUESTS")},
		&cli.IntFlag{Name: "worker-threads", Destination: &c.WorkerThreads, Usage: "OS threads per worker process (GOMAXPROCS); default: the cores left after one per rank and one for detokd, shared by the workers, at least 1 (a GOMAXPROCS in the environment wins)", Sources: cli.EnvVars("TOKENIZER_WORKER_THREADS")},
		&cli.StringFlag{Name: "tool-call-parser", Destination: &c.ToolCallParser, Value: "auto", Usage: "tool-call syntax: auto (from the chat template), hermes, llama3_json, mistral, deepseek_v3, qwen3_coder (auto only), harmony (auto only) or fallback (the engine's own, for templates without tools)", Sources: cli.EnvVars("TOOL_CALL_PARSER")},
		&cli.StringFlag{Name: "reasoning-parser", Destination: &c.ReasoningParser, Value: "auto", Usage: "thinking blocks into reasoning_content: auto (from the chat template), none, qwen3 or deepseek_r1", Sources: cli.EnvVars("REASONING_PARSER")},
		&cli.StringFlag{Name: "pooling", Destination: &c.Pooling, Value: "auto", Usage: "how /v1/embeddings pools the final hidden states: auto (the model directory's sentence-transformers modules.json / 1_Pooling, else last), last (decoder embedders such as Qwen3-Embedding), mean or cls", Sources: cli.EnvVars("POOLING")},
		&cli.IntFlag{Name: "worker-index", Destination: &c.WorkerIndex, Value: -1, Usage: "internal: run as worker i (set by the supervisor)", Hidden: true},
		&cli.Int64Flag{Name: "max-body-bytes", Destination: &c.MaxBodyBytes, Value: api.DefaultMaxBodyBytes, Usage: "largest request body; a larger one is a 413, refused from its Content-Length before it is read", Sources: cli.EnvVars("MAX_BODY_BYTES")},
		&cli.StringFlag{Name: "api-key", Destination: &c.APIKey, Usage: "require Authorization: Bearer KEY on every request but those to --open-paths", Sources: cli.EnvVars("API_KEY")},
		&cli.StringFlag{Name: "api-key-file", Destination: &c.APIKeyFile, Usage: "file of API keys, one per line ('#' comments), each accepted (with or without --api-key)", Sources: cli.EnvVars("API_KEY_FILE")},
		&cli.DurationFlag{Name: "read-header-timeout", Destination: &c.ReadHeaderTimeout, Value: 10 * time.Second, Usage: "time a client has to send a request's headers", Sources: cli.EnvVars("READ_HEADER_TIMEOUT")},
		&cli.DurationFlag{Name: "read-body-timeout", Destination: &c.ReadBodyTimeout, Value: 60 * time.Second, Usage: "time a client has to send a request's body", Sources: cli.EnvVars("READ_BODY_TIMEOUT")},
		&cli.DurationFlag{Name: "write-timeout", Destination: &c.WriteTimeout, Value: 60 * time.Second, Usage: "time a client has to take each write (a response, or one chunk of a stream) before it is cut", Sources: cli.EnvVars("WRITE_TIMEOUT")},
		&cli.DurationFlag{Name: "idle-timeout", Destination: &c.IdleTimeout, Value: 60 * time.Second, Usage: "how long a kept-alive connection may idle between requests", Sources: cli.EnvVars("IDLE_TIMEOUT")},
		&cli.IntFlag{Name: "max-connections", Destination: &c.MaxConnections, Usage: "open connections per worker; at the bound the longest-idle one is closed for a new one (default: the descriptor limit less 256)", Sources: cli.EnvVars("MAX_CONNECTIONS")},
		&cli.DurationFlag{Name: "drain-delay", Destination: &c.DrainDelay, Usage: "on SIGTERM: how long to keep serving with /health at 503 before the drain starts, so load balancers stop sending first (e.g. 5s behind Kubernetes)", Sources: cli.EnvVars("DRAIN_DELAY")},
		&cli.DurationFlag{Name: "shutdown-timeout", Destination: &c.ShutdownTimeout, Value: 30 * time.Second, Usage: "on SIGTERM: how long requests in flight may finish before they are ended (streams with a final error event, others with a 503)", Sources: cli.EnvVars("SHUTDOWN_TIMEOUT")},
		&cli.StringSliceFlag{Name: "open-paths", Destination: &c.OpenPaths, Value: api.DefaultOpenPaths, Usage: "paths that need no API key when keys are set (comma-separated; \"\" for none)", Sources: cli.EnvVars("OPEN_PATHS")},
	)
}

// check validates the settings both the supervisor and the workers depend on.
func (c *serveConfig) check() error {
	if err := c.Check(); err != nil {
		return err
	}
	if c.StreamInterval < 1 {
		return fmt.Errorf("--stream-interval must be an integer >= 1, got %d", c.StreamInterval)
	}
	if _, err := shard.ParseMethod(c.LoadBalanceMethod); err != nil {
		return err
	}
	if _, err := c.Topology(""); err != nil {
		return err
	}
	if c.MaxBodyBytes < 1 {
		return fmt.Errorf("--max-body-bytes must be >= 1, got %d", c.MaxBodyBytes)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read-header-timeout", c.ReadHeaderTimeout}, {"read-body-timeout", c.ReadBodyTimeout}, {"write-timeout", c.WriteTimeout},
		{"idle-timeout", c.IdleTimeout}, {"shutdown-timeout", c.ShutdownTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s must be > 0, got %v", d.name, d.v)
		}
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("--max-connections must be >= 0, got %d", c.MaxConnections)
	}
	if _, err := c.apiKeys(); err != nil {
		return err
	}
	if c.Pooling != "auto" {
		if _, err := api.ParsePooling(c.Pooling); err != nil {
			return fmt.Errorf("--pooling: %w", err)
		}
	}
	return checkParsers(c.ToolCallParser, c.ReasoningParser)
}

// apiKeys is --api-key and the keys in --api-key-file.
func (c *serveConfig) apiKeys() ([]string, error) {
	var keys []string
	if c.APIKey != "" {
		keys = append(keys, c.APIKey)
	}
	if c.APIKeyFile == "" {
		return keys, nil
	}
	data, err := os.ReadFile(c.APIKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	n := len(keys)
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	if len(keys) == n {
		return nil, fmt.Errorf("--api-key-file %s holds no key", c.APIKeyFile)
	}
	return keys, nil
}

// openPaths is --open-paths without empty entries (so "" means none).
func (c *serveConfig) openPaths() []string {
	paths := []string{}
	for _, p := range c.OpenPaths {
		if p = strings.TrimSpace(p); p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}

// checkParsers refuses unknown --tool-call-parser and --reasoning-parser values.
func checkParsers(tool, reasoning string) error {
	switch tool {
	case "auto", api.ToolSyntaxHermes, api.ToolSyntaxLlama3JSON, api.ToolSyntaxFallback,
		api.ToolSyntaxMistral, api.ToolSyntaxDeepSeekV3, api.ToolSyntaxQwen3Coder, api.ToolSyntaxHarmony:
	default:
		return fmt.Errorf("--tool-call-parser %q: want auto, hermes, llama3_json, mistral, deepseek_v3, qwen3_coder, harmony or fallback", tool)
	}
	switch reasoning {
	case "auto", "none", api.ReasoningQwen3, api.ReasoningDeepSeekR1:
	default:
		return fmt.Errorf("--reasoning-parser %q: want auto, none, qwen3 or deepseek_r1", reasoning)
	}
	return nil
}

// addr is the HTTP listen address, host:port.
func (c *serveConfig) addr() string {
	return net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

// serveCommand runs the supervisor, which starts --tokenizer-worker-num worker processes (this
// binary again, with --worker-index) and restarts any that dies; with --worker-index it is one
// worker: the HTTP API on the shared port and the worker's sockets.
func serveCommand() *cli.Command {
	var cfg serveConfig
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve the HTTP API with N tokenizer worker processes",
		Flags:     cfg.flags(),
		ArgsUsage: "[MODEL]",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := cfg.ModelArg(cmd); err != nil {
				return err
			}
			if err := cfg.check(); err != nil {
				return runflags.AsConfig(err)
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.WorkerIndex >= 0 {
				return runWorker(ctx, &cfg)
			}
			return superviseWorkers(ctx, &cfg)
		},
	}
}

// superviseWorkers starts the workers and restarts any that exits while the supervisor runs: a
// crashed worker loses only the requests it owned.
func superviseWorkers(ctx context.Context, cfg *serveConfig) error {
	log := cfg.Logger("tokenizerd")
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	n := cfg.TokenizerWorkerNum
	dir, err := cfg.OpenRunDir()
	if err != nil {
		return err
	}
	// Claim the run directory and the port before anything of a live engine could be replaced.
	if err := runflags.LockRunDir(dir, "tokenizerd"); err != nil {
		return err
	}
	runflags.WatchRunDir(time.Second, log)
	portLock, err := lockPort(ctx, cfg)
	if err != nil {
		return err
	}
	defer portLock.Close()
	if err := shard.CreateLedger(worker.LedgerPath(dir), n, cfg.DPSize); err != nil {
		return err
	}
	if err := metrics.CreateShared(metricsPath(dir), n); err != nil {
		return err
	}
	threads := workerThreads(cfg.WorkerThreads, n, cfg.DPSize, runtime.NumCPU())
	log.Info("starting tokenizer workers", "workers", n, "threads_per_worker", threads, "addr", cfg.addr())
	// A worker that refuses to start (exit status 78) stops the others: restarting cannot help.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// --port and --run-dir last: the port lockPort resolved (port 0 is a free port, the
			// same for all) and the run dir named by the port the engine was started with.
			args := append(append([]string(nil), os.Args[1:]...), "--worker-index", strconv.Itoa(i),
				"--port", strconv.Itoa(cfg.Port), "--run-dir", dir)
			err := supervise.Run(ctx, fmt.Sprintf("worker %d", i), func() *exec.Cmd {
				c := exec.Command(exe, args...)
				c.Stdout, c.Stderr = os.Stdout, os.Stderr
				// A worker dies with its supervisor (killed outright, say): unsupervised, a
				// crash would never be restarted, and the supervisor that replaces it starts
				// workers of the same indexes.
				c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if threads > 0 {
					c.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(threads))
				}
				return c
			}, cfg.ShutdownTimeout+5*time.Second, log)
			if err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// workerThreads is the GOMAXPROCS each worker process gets (0: leave the environment's). On a
// host where the ranks and detokd share cores with the workers, HTTP writers that take every
// core starve the step loop, so streams coalesce less and every token pays its own write: on 2
// cores at 4,096 streams capping the one worker at 1 thread took the engine from 0.43 to 0.75 of
// the bare-SSE ceiling (bench/streambench).
func workerThreads(flag, workers, ranks, cpus int) int {
	switch {
	case flag > 0:
		return flag
	case os.Getenv("GOMAXPROCS") != "":
		return 0
	}
	return max(1, (cpus-ranks-1)/workers)
}

// runWorker is one worker process: its tokenizer and grammar check, the worker engine on its
// sockets, the API on top, and the HTTP server on the shared port.
func runWorker(ctx context.Context, cfg *serveConfig) error {
	log := cfg.Logger("tokenizerd").With("worker", cfg.WorkerIndex)
	runflags.SetStreamingGC()
	mode := workerMode(&cfg.Config)
	tok, grammars, err := loadTokenizer(&cfg.Config, mode)
	if err != nil {
		return runflags.AsConfig(err) // a model path that does not hold a tokenizer
	}
	w, err := openWorker(cfg, mode, tok, grammars, log)
	if err != nil {
		return err
	}
	defer w.Close()
	reg, store, err := openMetrics(cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	srv, err := newAPIServer(cfg, w, mode, reg, log)
	if err != nil {
		store.Seal()
		return runflags.AsConfig(err) // the model's config.json, the API key file
	}
	lim, err := listenHTTP(ctx, cfg, reg)
	if err == nil {
		registerProcesses(reg, cfg, w)
	}
	store.Seal() // every counter, histogram and per-worker series is registered: publish this worker's layout
	if err != nil {
		return err
	}
	go reg.Publish(ctx)
	return serveHTTP(ctx, cfg, srv, lim, log)
}

// workerMode is the worker's mode from the --skip-* flags.
func workerMode(cfg *runflags.Config) worker.Mode {
	switch {
	case cfg.SkipTokenizerInit:
		return worker.ModeSkipTokenizerInit
	case cfg.SkipDetokenization:
		return worker.ModeSkipDetokenization
	}
	return worker.ModeDefault
}

// loadTokenizer loads the worker's tokenizer and the grammar compiler built on it; both are nil
// under --skip-tokenizer-init.
func loadTokenizer(cfg *runflags.Config, mode worker.Mode) (*tokenizer.Tokenizer, *grammar.Compiler, error) {
	if mode == worker.ModeSkipTokenizerInit {
		return nil, nil, nil
	}
	tok, err := tokenizer.Load(cfg.ModelPath)
	if err != nil {
		return nil, nil, err
	}
	gopts, err := cfg.GrammarOptions()
	if err != nil {
		return nil, nil, err
	}
	// The worker compiles (and caches) each constraint once up front so a bad schema or
	// regex is a 400 here; the rank compiles it again to enforce it.
	return tok, grammar.NewCompiler(tok, model.ConstraintEOS(model.EOSTokenIDsIn(cfg.ModelPath), tok), gopts), nil
}

// openWorker opens the dispatch ledger the supervisor created and the worker's sockets.
func openWorker(cfg *serveConfig, mode worker.Mode, tok *tokenizer.Tokenizer, grammars *grammar.Compiler, log *slog.Logger) (*worker.Worker, error) {
	dir, err := cfg.OpenRunDir()
	if err != nil {
		return nil, err
	}
	tr, err := cfg.OpenTransport()
	if err != nil {
		return nil, err
	}
	method, err := shard.ParseMethod(cfg.LoadBalanceMethod)
	if err != nil {
		return nil, runflags.AsConfig(err)
	}
	top, err := cfg.Topology(dir)
	if err != nil {
		return nil, err
	}
	ipc.SetSecurityLogger(log)
	ledger, err := shard.OpenLedger(worker.LedgerPath(dir), cfg.TokenizerWorkerNum, cfg.DPSize)
	if err != nil {
		return nil, fmt.Errorf("%w (the tokenizerd supervisor creates it; start workers through it)", err)
	}
	w, err := worker.New(worker.Config{
		Index: cfg.WorkerIndex, NumWorkers: cfg.TokenizerWorkerNum, DPSize: cfg.DPSize,
		RunDir: dir, Topology: top, Transport: tr, Mode: mode, Method: method, Tokenizer: tok,
		MaxRequests: cfg.MaxQueuedRequests, RankTimeout: cfg.RankTimeout, Log: log,
		Grammars: grammars, Ledger: ledger,
	})
	if err != nil {
		ledger.Close()
		return nil, err
	}
	log.Info("tokenizer worker sockets open", "mode", mode, "ranks", cfg.DPSize, "method", method,
		"run_dir", dir, "transport", tr.Name())
	return w, nil
}

// newAPIServer builds the HTTP API over w, with this worker's metrics registry.
func newAPIServer(cfg *serveConfig, w *worker.Worker, mode worker.Mode, reg *metrics.Registry, log *slog.Logger) (*api.Server, error) {
	mcfg, err := model.LoadConfig(cfg.ModelPath)
	if err != nil {
		return nil, err
	}
	name := cfg.ServedModelName
	if name == "" {
		abs, _ := filepath.Abs(cfg.ModelPath)
		name = strings.TrimSuffix(filepath.Base(abs), ".gguf") // a GGUF file is served under its stem
	}
	ctxLen := mcfg.MaxPositions
	if cfg.ContextLength > 0 {
		ctxLen = cfg.ContextLength
	}
	keys, err := cfg.apiKeys()
	if err != nil {
		return nil, err
	}
	registerRankGauges(reg, w, cfg.DPSize, name)
	emb := embeddingConfig(cfg.ModelPath, cfg.Pooling, mcfg.HiddenSize, log)
	return api.NewServer(api.Config{
		ServedModelName: name, ContextLength: ctxLen, KVTokens: func() int { return kvTokens(w) }, DefaultSampling: defaultSampling(cfg.ModelPath, log),
		StreamInterval: cfg.StreamInterval, SkipTokenizerInit: mode == worker.ModeSkipTokenizerInit, Worker: cfg.WorkerIndex,
		MaxBodyBytes: cfg.MaxBodyBytes, APIKeys: keys, OpenPaths: cfg.openPaths(),
		ReadBodyTimeout: cfg.ReadBodyTimeout, WriteTimeout: cfg.WriteTimeout,
		ToolCallParser: cfg.ToolCallParser, ReasoningParser: cfg.ReasoningParser,
		GrammarStrict: cfg.GrammarStrict, SchedulingPolicy: cfg.SchedulingPolicy, Embeddings: emb,
	}, w, reg, log)
}

// embeddingConfig is /v1/embeddings' pooling and post-processing: --pooling when given, else the
// model directory's sentence-transformers pooling, else last-token pooling (what decoder
// embedders use); normalized unless a sentence-transformers config without a Normalize module
// says otherwise; dimensions honoured for Matryoshka models only. A model whose configured
// pooling this engine does not implement serves generation as usual and answers embeddings with
// a 400 naming why (and --pooling overrides it).
func embeddingConfig(dir, flag string, hidden int, log *slog.Logger) api.EmbeddingConfig {
	ec := api.EmbeddingConfig{Size: hidden, Pooling: api.PoolingLast}
	mc, err := model.LoadEmbeddingConfig(dir)
	ec.Matryoshka, ec.MatryoshkaDims = mc.Matryoshka, mc.MatryoshkaDims
	switch {
	case flag != "auto" && flag != "":
		ec.Pooling, _ = api.ParsePooling(flag) // checked with the flags
	case err != nil:
		ec.Unavailable = err.Error() + " (set --pooling to choose one)"
		log.Warn("embeddings unavailable", "err", err)
	case mc.Pooling != "":
		ec.Pooling, _ = api.ParsePooling(mc.Pooling) // one of last, mean, cls
	}
	if err == nil && mc.Pooling != "" {
		ec.SkipNormalize = !mc.Normalize
	}
	return ec
}

// kvTokens is the KV cache positions of the smallest rank that reports (0: none has yet).
func kvTokens(w *worker.Worker) int {
	least := 0
	for _, rl := range w.Snapshot().Ranks {
		if c := int(rl.Reported.KVTokensCapacity); c > 0 && (least == 0 || c < least) {
			least = c
		}
	}
	return least
}

// defaultSampling is the model's generation_config.json over the OpenAI defaults.
func defaultSampling(path string, log *slog.Logger) sampling.Params {
	p := sampling.DefaultParams()
	gc, err := model.LoadGenerationConfig(path)
	if err != nil {
		log.Debug("no generation config; OpenAI sampling defaults", "err", err)
		return p
	}
	if gc.Temperature > 0 {
		p.Temperature = float32(gc.Temperature)
	}
	if gc.TopP > 0 && gc.TopP <= 1 {
		p.TopP = float32(gc.TopP)
	}
	if gc.TopK > 0 {
		p.TopK = gc.TopK
	}
	if p.Validate() != nil {
		return sampling.DefaultParams()
	}
	return p
}

// openMetrics opens this worker's registry. Its counters and histograms live in the store the
// supervisor created, one slot per worker, so /metrics shows the whole engine whichever worker
// the scrape's connection reached.
func openMetrics(cfg *serveConfig) (*metrics.Registry, *metrics.Shared, error) {
	dir, err := cfg.OpenRunDir()
	if err != nil {
		return nil, nil, err
	}
	store, err := metrics.OpenShared(metricsPath(dir), cfg.TokenizerWorkerNum, cfg.WorkerIndex)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (the tokenizerd supervisor creates it; start workers through it)", err)
	}
	return metrics.NewSharedRegistry(store), store, nil
}

// registerProcesses registers the process_* series of every process of the engine: this
// worker's own and its Go runtime's (per worker), and, read from /proc by pid (each role's
// run-dir lock holds it), the supervisor's, every rank's and detokd's; the go_* series of every
// rank and detokd, from the stats they last sent w (with their load reports); and the build's
// identity.
func registerProcesses(reg *metrics.Registry, cfg *serveConfig, w *worker.Worker) {
	reg.RegisterOwnProcess(metrics.Labels{{"process", "tokenizerd-worker"}})
	dir := cfg.RunDirPath()
	byLock := func(role, binary string) func() int {
		return func() int { return lockHolder(filepath.Join(dir, role+".lock"), binary) }
	}
	reg.RegisterProcess(metrics.Labels{{"process", "tokenizerd"}}, byLock("tokenizerd", "tokenizerd"))
	for r := 0; r < cfg.DPSize; r++ {
		l := metrics.Labels{{"process", "schedulerd"}, {"rank", strconv.Itoa(r)}}
		reg.RegisterProcess(l, byLock(fmt.Sprintf("schedulerd-%d", r), "schedulerd"))
		reg.RegisterGoRuntime(l, func() (metrics.GoRuntime, bool) { return w.GoRuntime(r) })
	}
	if workerMode(&cfg.Config) == worker.ModeDefault {
		l := metrics.Labels{{"process", "detokd"}}
		reg.RegisterProcess(l, byLock("detokd", "detokd"))
		reg.RegisterGoRuntime(l, func() (metrics.GoRuntime, bool) { return w.GoRuntime(-1) })
	}
	reg.RegisterBuildInfo(version.Version, version.Commit())
}

// lockHolder is the pid written in a run-dir lock file when that process still runs binary
// (0 otherwise: a stale pid may name another program now).
func lockHolder(path, binary string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	argv0, _, _ := strings.Cut(string(cmd), "\x00")
	if err != nil || filepath.Base(argv0) != binary {
		return 0
	}
	return pid
}

// metricsPath is the workers' shared metrics store in the run directory.
func metricsPath(runDir string) string { return filepath.Join(runDir, "metrics") }

// registerRankGauges exposes what this worker knows of every rank's load (every worker hears
// every rank), labelled by rank, and the engine-wide gauges under vLLM's names.
func registerRankGauges(reg *metrics.Registry, w *worker.Worker, ranks int, model string) {
	ml := metrics.Labels{{"model_name", model}}
	total := func(f func(rl *shard.RankLoad) float64) func() float64 {
		return func() float64 {
			var v float64
			for _, rl := range w.Snapshot().Ranks {
				v += f(&rl)
			}
			return v
		}
	}
	reg.NewGaugeFunc("vllm:num_requests_running", "Requests in the ranks' batches.", ml,
		total(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Running) }))
	reg.NewGaugeFunc("vllm:num_requests_waiting", "Requests queued at the ranks.", ml,
		total(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Waiting) }))
	registerPriorityGauges(reg, w, model)
	kvUsage := func() float64 {
		var used, capacity float64
		for _, rl := range w.Snapshot().Ranks {
			used += float64(rl.Reported.KVTokensUsed)
			capacity += float64(rl.Reported.KVTokensCapacity)
		}
		if capacity == 0 {
			return 0
		}
		return used / capacity
	}
	// vLLM's dashboard reads gpu_cache_usage_perc; newer vLLM names it kv_cache_usage_perc.
	// Both are fractions (0-1) despite the name, as in vLLM.
	reg.NewGaugeFunc("vllm:gpu_cache_usage_perc", "KV cache positions in use over capacity, all ranks (0-1).", ml, kvUsage)
	reg.NewGaugeFunc("vllm:kv_cache_usage_perc", "KV cache positions in use over capacity, all ranks (0-1).", ml, kvUsage)
	// The Gateway API Inference Extension's model-server protocol reads the KV block size and
	// count from vllm:cache_config_info's labels, and the adapters loaded from
	// vllm:lora_requests_info's (none: LoRA is not supported; the value is the time, as vLLM's).
	reg.NewInfoFunc("vllm:cache_config_info", "KV cache geometry, all ranks: block_size positions per block, num_gpu_blocks blocks.",
		func() metrics.Labels {
			var bs, blocks int64
			for _, rl := range w.Snapshot().Ranks {
				if b := rl.Reported.KVBlockSize; b > 0 {
					bs = b
					blocks += rl.Reported.KVTokensCapacity / b
				}
			}
			if bs == 0 {
				return nil // no rank has reported yet
			}
			return metrics.Labels{{"block_size", strconv.FormatInt(bs, 10)}, {"num_gpu_blocks", strconv.FormatInt(blocks, 10)}}
		})
	reg.NewGaugeFunc("vllm:lora_requests_info", "LoRA adapters running and waiting (none: LoRA is not supported).",
		metrics.Labels{{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}},
		func() float64 { return float64(time.Now().UnixNano()) / 1e9 })
	// vllm:num_preemptions_total is the API's: counted from finished requests in the shared
	// store, it never goes down between scrapes of different workers, as a sum of each worker's
	// latest rank reports could.
	// The worker-labelled series are per worker (each knows only its own), published to the
	// shared store so that every scrape shows every worker's (metrics.NewWorkerGaugeFunc).
	reg.NewWorkerGaugeFunc("llm_worker_in_flight_requests", "Requests this worker owns that have not finished.", nil,
		func() float64 { return float64(w.InFlight()) })
	for r := 0; r < ranks; r++ {
		l := metrics.Labels{{"rank", strconv.Itoa(r)}}
		get := func(f func(rl *shard.RankLoad) float64) func() float64 {
			return func() float64 {
				s := w.Snapshot()
				if r >= len(s.Ranks) {
					return 0
				}
				return f(&s.Ranks[r])
			}
		}
		for _, sr := range rankSeries {
			if sr.counter {
				reg.NewWorkerCounterFunc(sr.name, sr.help, l, get(sr.value))
			} else {
				reg.NewWorkerGaugeFunc(sr.name, sr.help, l, get(sr.value))
			}
		}
	}
}

// rankSeries are the per-rank series each worker publishes (labelled rank) from its view of the
// rank's reports. The steps and speculative counts are the rank's own as they happen (the
// vllm:spec_decode_* series count them at each request's finish): tokens per forward pass is
// generated tokens over steps.
var rankSeries = []struct {
	name, help string
	counter    bool
	value      func(rl *shard.RankLoad) float64
}{
	{"llm_rank_up", "1 when the rank reports, 0 when it is down.", false, func(rl *shard.RankLoad) float64 {
		if rl.Up {
			return 1
		}
		return 0
	}},
	{"llm_rank_running_requests", "Requests in the rank's batch.", false, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Running) }},
	{"llm_rank_waiting_requests", "Requests queued at the rank.", false, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Waiting) }},
	{"llm_rank_kv_tokens_used", "KV cache positions in use at the rank.", false, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.KVTokensUsed) }},
	{"llm_rank_kv_tokens_capacity", "KV cache positions at the rank.", false, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.KVTokensCapacity) }},
	{"llm_rank_preemptions_total", "Requests the rank evicted from its batch to free KV blocks.", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Preemptions) }},
	{"llm_rank_prefix_hit_tokens_total", "Prompt tokens the rank took from its prefix cache.", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.PrefixHitTokens) }},
	{"llm_rank_steps_total", "Forward steps the rank ran.", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Steps) }},
	{"llm_rank_spec_drafts_total", "Speculative verifications at the rank (one per request and step with draft tokens).", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.SpecDrafts) }},
	{"llm_rank_spec_draft_tokens_total", "Draft tokens the rank verified.", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.SpecDraftTokens) }},
	{"llm_rank_spec_accepted_tokens_total", "Draft tokens the rank accepted.", true, func(rl *shard.RankLoad) float64 { return float64(rl.Reported.SpecAccepted) }},
	{"llm_rank_pending_requests", "Requests this worker sent the rank that it has not acknowledged.", false, func(rl *shard.RankLoad) float64 { return float64(rl.Pending) }},
}
