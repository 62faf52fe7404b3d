package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/runner"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/llmserve/llmserve/worker"
	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"
)

// serveCommand runs the supervisor, which starts --tokenizer-worker-num worker processes (this
// binary again, with --worker-index) and restarts any that dies; with --worker-index it is one
// worker: the HTTP API on the shared port and the worker's sockets.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the HTTP API with N tokenizer worker processes",
		Flags: append(runflags.Common(),
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "HTTP listen address", Sources: cli.EnvVars("HOST")},
			&cli.StringFlag{Name: "served-model-name", Usage: "model id in the API (default: the model directory's name)", Sources: cli.EnvVars("SERVED_MODEL_NAME")},
			&cli.IntFlag{Name: "context-length", Usage: "context length (default: the model's max_position_embeddings)"},
			&cli.IntFlag{Name: "stream-interval", Value: 1, Usage: "tokens per streamed chunk after the first (server default)", Sources: cli.EnvVars("STREAM_INTERVAL")},
			&cli.StringFlag{Name: "load-balance-method", Value: "shortest_queue", Usage: "round_robin, shortest_queue or minimum_tokens", Sources: cli.EnvVars("LOAD_BALANCE_METHOD")},
			&cli.DurationFlag{Name: "rank-timeout", Value: time.Second, Usage: "a rank silent this long is marked down and its requests fail"},
			&cli.IntFlag{Name: "max-queued-requests", Value: 65536, Usage: "requests one worker holds in flight; more get 503"},
			&cli.IntFlag{Name: "worker-threads", Usage: "OS threads per worker process (GOMAXPROCS); default: the cores left after one per rank and one for detokd, shared by the workers, at least 1 (a GOMAXPROCS in the environment wins)", Sources: cli.EnvVars("TOKENIZER_WORKER_THREADS")},
			&cli.IntFlag{Name: "worker-index", Value: -1, Usage: "internal: run as worker i (set by the supervisor)", Hidden: true},
		),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := runflags.Check(cmd); err != nil {
				return err
			}
			if n := cmd.Int("stream-interval"); n < 1 {
				return fmt.Errorf("--stream-interval must be an integer >= 1, got %d", n)
			}
			if _, err := shard.ParseMethod(cmd.String("load-balance-method")); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			if i := int(cmd.Int("worker-index")); i >= 0 {
				return runWorker(ctx, cmd, i)
			}
			return supervise(ctx, cmd)
		},
	}
}

// supervise starts the workers and restarts any that exits while the supervisor runs: a
// crashed worker loses only the requests it owned.
func supervise(ctx context.Context, cmd *cli.Command) error {
	log := runflags.Logger(cmd, "tokenizerd")
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	n := int(cmd.Int("tokenizer-worker-num"))
	dir, err := runflags.RunDir(cmd)
	if err != nil {
		return err
	}
	if err := shard.CreateLedger(worker.LedgerPath(dir), n, int(cmd.Int("dp-size"))); err != nil {
		return err
	}
	threads := workerThreads(int(cmd.Int("worker-threads")), n, int(cmd.Int("dp-size")), runtime.NumCPU())
	log.Info("starting tokenizer workers", "workers", n, "threads_per_worker", threads, "addr", net.JoinHostPort(cmd.String("host"), strconv.Itoa(int(cmd.Int("port")))))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			backoff := 100 * time.Millisecond
			for ctx.Err() == nil {
				args := append(append([]string(nil), os.Args[1:]...), "--worker-index", strconv.Itoa(i))
				c := exec.Command(exe, args...)
				c.Stdout, c.Stderr = os.Stdout, os.Stderr
				if threads > 0 {
					c.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(threads))
				}
				started := time.Now()
				if err := c.Start(); err != nil {
					log.Error("start worker", "worker", i, "err", err)
					return
				}
				done := make(chan error, 1)
				go func() { done <- c.Wait() }()
				select {
				case <-ctx.Done():
					_ = c.Process.Signal(syscall.SIGTERM)
					select {
					case <-done:
					case <-time.After(10 * time.Second):
						_ = c.Process.Kill()
						<-done
					}
					return
				case err := <-done:
					log.Error("worker exited; restarting it", "worker", i, "err", err)
					if time.Since(started) > 10*time.Second {
						backoff = 100 * time.Millisecond
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(backoff):
					}
					backoff = min(2*backoff, 5*time.Second)
				}
			}
		}()
	}
	wg.Wait()
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

// runWorker is one worker process.
func runWorker(ctx context.Context, cmd *cli.Command, index int) error {
	log := runflags.Logger(cmd, "tokenizerd").With("worker", index)
	dir, err := runflags.RunDir(cmd)
	if err != nil {
		return err
	}
	tr, err := runflags.Transport(cmd)
	if err != nil {
		return err
	}
	path := cmd.String("model-path")
	mcfg, err := model.LoadConfig(path)
	if err != nil {
		return err
	}
	mode := worker.ModeDefault
	switch {
	case cmd.Bool("skip-tokenizer-init"):
		mode = worker.ModeSkipTokenizerInit
	case cmd.Bool("skip-detokenization"):
		mode = worker.ModeSkipDetokenization
	}
	var tok *tokenizer.Tokenizer
	if mode != worker.ModeSkipTokenizerInit {
		if tok, err = tokenizer.Load(path); err != nil {
			return err
		}
	}
	var checkGrammar func(api.GrammarKind, string) error
	if tok != nil {
		gopts, err := runflags.GrammarOptions(cmd)
		if err != nil {
			return err
		}
		// The worker compiles (and caches) each constraint once up front so a bad schema or
		// regex is a 400 here; the rank compiles it again to enforce it.
		gc := grammar.NewCompiler(tok, runflags.GrammarEOS(runflags.ModelEOS(path), tok), gopts)
		checkGrammar = func(kind api.GrammarKind, spec string) error {
			_, err := runner.Compile(gc, ipc.GrammarKind(kind), spec)
			return err
		}
	}
	method, _ := shard.ParseMethod(cmd.String("load-balance-method"))
	ledger, err := shard.OpenLedger(worker.LedgerPath(dir), int(cmd.Int("tokenizer-worker-num")), int(cmd.Int("dp-size")))
	if err != nil {
		return fmt.Errorf("%w (the tokenizerd supervisor creates it; start workers through it)", err)
	}
	defer ledger.Close()
	w, err := worker.New(worker.Config{
		Index: index, NumWorkers: int(cmd.Int("tokenizer-worker-num")), DPSize: int(cmd.Int("dp-size")),
		RunDir: dir, Transport: tr, Mode: mode, Method: method, Tokenizer: tok,
		MaxRequests: int(cmd.Int("max-queued-requests")), RankTimeout: cmd.Duration("rank-timeout"), Log: log,
		CheckGrammar: checkGrammar, Ledger: ledger,
	})
	if err != nil {
		return err
	}
	defer w.Close()

	name := cmd.String("served-model-name")
	if name == "" {
		abs, _ := filepath.Abs(path)
		name = strings.TrimSuffix(filepath.Base(abs), ".gguf") // a GGUF file is served under its stem
	}
	ctxLen := mcfg.MaxPositions
	if n := int(cmd.Int("context-length")); n > 0 {
		ctxLen = n
	}
	reg := metrics.NewRegistry()
	registerRankGauges(reg, w, index, int(cmd.Int("dp-size")))
	srv, err := api.NewServer(api.Config{
		ModelName: name, ContextLength: ctxLen, DefaultSampling: defaultSampling(path, log),
		StreamInterval: int(cmd.Int("stream-interval")), SkipTokenizerInit: mode == worker.ModeSkipTokenizerInit, Worker: index,
	}, w, reg, log)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(cmd.String("host"), strconv.Itoa(int(cmd.Int("port"))))
	ln, err := listenReusePort(ctx, addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Info("tokenizer worker ready", "addr", addr, "mode", mode, "ranks", cmd.Int("dp-size"),
		"method", method, "run_dir", dir, "transport", tr.Name(), "model", name)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenReusePort listens with SO_REUSEPORT so that every worker process accepts on one port
// and the kernel spreads the connections.
func listenReusePort(ctx context.Context, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
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

// registerRankGauges exposes what this worker knows of every rank's load, labelled by rank.
func registerRankGauges(reg *metrics.Registry, w *worker.Worker, index, ranks int) {
	wl := metrics.Labels{{"worker", strconv.Itoa(index)}}
	reg.NewGaugeFunc("llm_worker_in_flight_requests", "Requests this worker owns that have not finished.", wl,
		func() float64 { return float64(w.InFlight()) })
	for r := 0; r < ranks; r++ {
		l := append(metrics.Labels{{"rank", strconv.Itoa(r)}}, wl...)
		get := func(f func(rl *shard.RankLoad) float64) func() float64 {
			return func() float64 {
				s := w.Snapshot()
				if r >= len(s.Ranks) {
					return 0
				}
				return f(&s.Ranks[r])
			}
		}
		reg.NewGaugeFunc("llm_rank_up", "1 when the rank reports, 0 when it is down.", l,
			get(func(rl *shard.RankLoad) float64 {
				if rl.Up {
					return 1
				}
				return 0
			}))
		reg.NewGaugeFunc("llm_rank_running_requests", "Requests in the rank's batch.", l,
			get(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Running) }))
		reg.NewGaugeFunc("llm_rank_waiting_requests", "Requests queued at the rank.", l,
			get(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.Waiting) }))
		reg.NewGaugeFunc("llm_rank_kv_tokens_used", "KV cache positions in use at the rank.", l,
			get(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.KVTokensUsed) }))
		reg.NewGaugeFunc("llm_rank_kv_tokens_capacity", "KV cache positions at the rank.", l,
			get(func(rl *shard.RankLoad) float64 { return float64(rl.Reported.KVTokensCapacity) }))
		reg.NewGaugeFunc("llm_rank_pending_requests", "Requests this worker sent the rank that it has not acknowledged.", l,
			get(func(rl *shard.RankLoad) float64 { return float64(rl.Pending) }))
	}
}
