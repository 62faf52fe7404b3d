package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

// Config is one load-generation run.
type Config struct {
	URL         string // server base URL, e.g. http://127.0.0.1:30000
	AllowRemote bool   // permit a non-loopback host
	Endpoint    string // "completions" or "chat"
	Model       string // "" = the first model /v1/models lists

	Concurrency int           // closed loop: streams kept open; open loop: cap on in-flight (0 = none)
	Requests    int           // stop after this many requests (0 = no count limit)
	Duration    time.Duration // stop starting requests after this long (0 = no time limit)
	Rate        float64       // > 0: open loop with Poisson arrivals at this many requests/s
	// Ramp spreads the closed loop's first requests evenly over this long, so that streams of
	// equal length do not start, and so keep finishing and restarting, in one synchronized wave.
	Ramp time.Duration

	InputLen       int  // prompt length in tokens (words for text prompts)
	OutputLen      int  // max_tokens
	Vocab          int  // prompt ids are drawn from [0, Vocab)
	TextPrompts    bool // send random words instead of token ids (always so for chat)
	IgnoreEOS      bool // ask for exactly OutputLen tokens, and check it
	StreamInterval int  // > 0: sent as stream_interval

	// ExpectSequence, when set, is checked id by id (see tokseq for the formulas).
	ExpectSequence *tokseq.Sequence

	DisconnectFrac float64       // fraction of streams the client closes at a random point
	CheckDrained   bool          // afterwards poll /get_load until nothing runs or waits
	DrainTimeout   time.Duration // how long to poll

	RequestTimeout time.Duration // bound on one request, headers to [DONE]
	Seed           uint64        // prompts and disconnect points derive from it
	Progress       time.Duration // stderr progress period (0 = none)
}

// cliOptions are the command's own flags, outside the run's Config.
type cliOptions struct {
	JSON       bool   // print a one-line JSON summary too
	CPUProfile string // write a CPU profile of the load generator here
}

// parseFlags reads the command line into a Config and the command's own options.
func parseFlags(args []string, stderr io.Writer) (cfg Config, opts cliOptions, err error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:30000", "server base URL (loopback unless -allow-remote)")
	fs.BoolVar(&cfg.AllowRemote, "allow-remote", false, "allow a URL whose host is not a loopback address")
	fs.StringVar(&cfg.Endpoint, "endpoint", "completions", "completions | chat")
	fs.StringVar(&cfg.Model, "model", "", "model name (default: the first one /v1/models lists)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "closed loop: concurrent streams; with -rate: cap on in-flight requests (default none)")
	fs.IntVar(&cfg.Requests, "requests", 0, "number of requests (default 4 x concurrency when -duration is not set)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "start requests for this long, then let the open ones finish")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: Poisson arrivals at this many requests/s")
	fs.DurationVar(&cfg.Ramp, "ramp", 0, "closed loop: start the streams evenly over this long instead of all at once")
	fs.IntVar(&cfg.InputLen, "input-len", 128, "prompt length in tokens")
	fs.IntVar(&cfg.OutputLen, "output-len", 256, "max_tokens")
	fs.IntVar(&cfg.Vocab, "vocab", 8192, "prompt token ids are drawn below this")
	fs.BoolVar(&cfg.TextPrompts, "text-prompts", false, "send random words as text instead of token ids")
	fs.BoolVar(&cfg.IgnoreEOS, "ignore-eos", true, "send ignore_eos and require exactly max_tokens tokens")
	fs.IntVar(&cfg.StreamInterval, "stream-interval", 0, "send stream_interval K (0 = leave to the server)")
	seq := fs.String("expect-sequence", "", "check ids against affine:START,STEP,MOD or prompt:STEP,MOD (key = last prompt id)")
	fs.Float64Var(&cfg.DisconnectFrac, "disconnect-frac", 0, "fraction of streams to close at a random point")
	fs.BoolVar(&cfg.CheckDrained, "check-drained", false, "afterwards poll GET /get_load until running+waiting is 0")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 10*time.Second, "how long -check-drained polls")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", 10*time.Minute, "bound on one request")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed for prompts and disconnect points")
	fs.DurationVar(&cfg.Progress, "progress", time.Second, "progress period on stderr (0 = off)")
	fs.BoolVar(&opts.JSON, "json", false, "also print a one-line JSON summary on stdout")
	fs.StringVar(&opts.CPUProfile, "cpuprofile", "", "write the load generator's CPU profile to this file (to check it is not the bottleneck)")
	if err := fs.Parse(args); err != nil {
		return Config{}, opts, err
	}
	if fs.NArg() > 0 {
		return Config{}, opts, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.Rate > 0 && !set["concurrency"] {
		cfg.Concurrency = 0
	}
	if *seq != "" {
		s, err := tokseq.Parse(*seq)
		if err != nil {
			return Config{}, opts, fmt.Errorf("-expect-sequence: %w", err)
		}
		cfg.ExpectSequence = &s
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Requests = 4 * max(cfg.Concurrency, 16)
	}
	return cfg, opts, cfg.validate()
}

func (cfg *Config) validate() error {
	var errs []error
	u, err := url.Parse(cfg.URL)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("-url: %w", err))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, fmt.Errorf("-url %q: scheme must be http or https", cfg.URL))
	case !cfg.AllowRemote && !isLoopback(u.Hostname()):
		errs = append(errs, fmt.Errorf("-url %q: host is not loopback (pass -allow-remote to load another machine)", cfg.URL))
	}
	if cfg.Endpoint != "completions" && cfg.Endpoint != "chat" {
		errs = append(errs, fmt.Errorf("-endpoint %q: want completions or chat", cfg.Endpoint))
	}
	if cfg.Ramp < 0 {
		errs = append(errs, fmt.Errorf("-ramp %s is negative", cfg.Ramp))
	}
	if cfg.Rate < 0 {
		errs = append(errs, fmt.Errorf("-rate %g is negative", cfg.Rate))
	}
	if cfg.Rate == 0 && cfg.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency %d: need at least 1 (or -rate)", cfg.Concurrency))
	}
	if cfg.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("-concurrency %d is negative", cfg.Concurrency))
	}
	if cfg.Requests < 0 || cfg.Duration < 0 {
		errs = append(errs, errors.New("-requests and -duration must not be negative"))
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		errs = append(errs, errors.New("need -requests or -duration so the run ends"))
	}
	if cfg.InputLen < 1 || cfg.OutputLen < 1 || cfg.Vocab < 1 {
		errs = append(errs, fmt.Errorf("-input-len %d, -output-len %d, -vocab %d: each must be >= 1", cfg.InputLen, cfg.OutputLen, cfg.Vocab))
	}
	if cfg.StreamInterval < 0 {
		errs = append(errs, fmt.Errorf("-stream-interval %d is negative", cfg.StreamInterval))
	}
	if cfg.DisconnectFrac < 0 || cfg.DisconnectFrac > 1 {
		errs = append(errs, fmt.Errorf("-disconnect-frac %g: want 0..1", cfg.DisconnectFrac))
	}
	if cfg.RequestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("-request-timeout %s must be positive", cfg.RequestTimeout))
	}
	if cfg.ExpectSequence != nil && cfg.ExpectSequence.Kind == tokseq.PromptKeyed && cfg.usesText() {
		errs = append(errs, errors.New("-expect-sequence prompt:... needs token-id prompts (not -text-prompts or chat)"))
	}
	return errors.Join(errs...)
}

// usesText says whether prompts are sent as text.
func (cfg *Config) usesText() bool { return cfg.TextPrompts || cfg.Endpoint == "chat" }

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
