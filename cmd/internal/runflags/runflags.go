// Package runflags holds the settings every engine binary shares (model, run directory, process
// counts, modes, transport, grammar limits, logging), each a flag with its environment-variable
// fallback, so that the Procfile, systemd units and `make run` configure all processes the same
// way. Flags are parsed once into a Config; the commands read its fields.
package runflags

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/llmserve/llmserve/cmd/internal/supervise"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/internal/version"
	"github.com/llmserve/llmserve/ipc"
	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"
)

// Config is the shared settings. Each field is its flag's name in CamelCase.
type Config struct {
	// ModelPath is the Hugging Face model directory.
	ModelPath string
	// RunDir is the private directory of the ipc sockets as given ("" for the default; see
	// OpenRunDir).
	RunDir string
	// Port is the HTTP port; it also names the default run directory.
	Port int
	// TokenizerWorkerNum is the number of tokenizer worker processes.
	TokenizerWorkerNum int
	// DPSize is the number of data-parallel ranks (schedulerd processes).
	DPSize int
	// SkipDetokenization: no detokd; the workers detokenize the requests they own.
	SkipDetokenization bool
	// SkipTokenizerInit: no tokenizer anywhere; token ids in and out only.
	SkipTokenizerInit bool
	// Transport names the ZMQ implementation ("" for the best in this build).
	Transport string
	// GrammarMaxSchemaBytes, GrammarMaxGBNFBytes, GrammarMaxDepth, GrammarCacheMB,
	// GrammarWhitespace and GrammarStrict are the structured-output compiler's settings (see
	// GrammarOptions).
	GrammarMaxSchemaBytes int
	GrammarMaxGBNFBytes   int
	GrammarMaxDepth       int
	GrammarCacheMB        int
	GrammarWhitespace     string
	GrammarStrict         bool
	// SchedulingPolicy is the ranks' queue order, fcfs or priority (the request's priority
	// field, lower first); tokenizerd reads it to say whether priority is ignored.
	SchedulingPolicy string
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text (logfmt lines) or json (one JSON object a line).
	LogFormat string
	// Remote places the processes on several hosts (remote.go).
	Remote
}

// Flags returns the shared flags, each bound to its field of c.
func (c *Config) Flags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "model-path", Aliases: []string{"model", "m"}, Destination: &c.ModelPath, Value: "models/pico", Usage: "Hugging Face model directory, or a GGUF file (also the command's argument: serve MODEL)", Sources: cli.EnvVars("MODEL_PATH")},
		&cli.StringFlag{Name: "run-dir", Destination: &c.RunDir, Usage: "private directory (0700) holding the ipc sockets; default: $XDG_RUNTIME_DIR or /tmp, /llmserve-UID-PORT", Sources: cli.EnvVars("LLMSERVE_RUN_DIR")},
		&cli.IntFlag{Name: "port", Destination: &c.Port, Value: 30000, Usage: "HTTP port (also names the default run dir)", Sources: cli.EnvVars("LLMSERVE_PORT", "PORT")},
		&cli.IntFlag{Name: "tokenizer-worker-num", Destination: &c.TokenizerWorkerNum, Value: 1, Usage: "tokenizer worker processes", Sources: cli.EnvVars("TOKENIZER_WORKERS")},
		&cli.IntFlag{Name: "dp-size", Destination: &c.DPSize, Value: 1, Usage: "data-parallel ranks (schedulerd processes)", Sources: cli.EnvVars("DP_SIZE")},
		&cli.BoolFlag{Name: "skip-detokenization", Destination: &c.SkipDetokenization, Usage: "no detokd: workers detokenize the requests they own", Sources: cli.EnvVars("SKIP_DETOKENIZATION")},
		&cli.BoolFlag{Name: "skip-tokenizer-init", Destination: &c.SkipTokenizerInit, Usage: "no tokenizer anywhere: token ids in and out only", Sources: cli.EnvVars("SKIP_TOKENIZER_INIT")},
		&cli.StringFlag{Name: "transport", Destination: &c.Transport, Usage: "ZMQ implementation: libzmq (cgo builds) or gozmq; default: the best in this build", Sources: cli.EnvVars("LLMSERVE_TRANSPORT")},
		&cli.IntFlag{Name: "grammar-max-schema-bytes", Destination: &c.GrammarMaxSchemaBytes, Value: 1 << 20, Usage: "largest JSON schema or regex accepted for structured output", Sources: cli.EnvVars("GRAMMAR_MAX_SCHEMA_BYTES")},
		&cli.IntFlag{Name: "grammar-max-gbnf-bytes", Destination: &c.GrammarMaxGBNFBytes, Value: grammar.DefaultMaxGBNFBytes, Usage: "largest GBNF grammar accepted (guided_grammar, ebnf, /generate's grammar), refused before it is parsed", Sources: cli.EnvVars("GRAMMAR_MAX_GBNF_BYTES")},
		&cli.IntFlag{Name: "grammar-max-depth", Destination: &c.GrammarMaxDepth, Value: 64, Usage: "deepest schema nesting accepted for structured output", Sources: cli.EnvVars("GRAMMAR_MAX_DEPTH")},
		&cli.IntFlag{Name: "grammar-cache-mb", Destination: &c.GrammarCacheMB, Value: 64, Usage: "memory the compiled-grammar cache may hold, their DFA and masks included (MiB; least recently used dropped first)", Sources: cli.EnvVars("GRAMMAR_CACHE_MB")},
		&cli.StringFlag{Name: "grammar-whitespace", Destination: &c.GrammarWhitespace, Value: "compact", Usage: "JSON whitespace structured output allows: compact or flexible", Sources: cli.EnvVars("GRAMMAR_WHITESPACE")},
		&cli.BoolFlag{Name: "grammar-strict", Destination: &c.GrammarStrict, Value: true, Usage: "schemas that list properties allow no other keys unless additionalProperties says so (and tuples no extra items), as in OpenAI's strict mode; false: JSON Schema's permissive defaults", Sources: cli.EnvVars("GRAMMAR_STRICT")},
		&cli.StringFlag{Name: "scheduling-policy", Destination: &c.SchedulingPolicy, Value: "fcfs", Usage: "queue order on every rank: fcfs (arrival) or priority (the request's priority field, lower first; worse-priority running requests are preempted when KV blocks run short)", Sources: cli.EnvVars("SCHEDULING_POLICY")},
		&cli.StringFlag{Name: "log-level", Destination: &c.LogLevel, Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Destination: &c.LogFormat, Value: "text", Usage: "log lines as text (key=value) or json (one object a line)", Sources: cli.EnvVars("LOG_FORMAT")},
	}, c.Remote.flags()...)
}

// Check validates the process counts.
func (c *Config) Check() error {
	if n := c.TokenizerWorkerNum; n < 1 || n > 256 {
		return fmt.Errorf("--tokenizer-worker-num must be in [1, 256], got %d", n)
	}
	if n := c.DPSize; n < 1 || n > 256 {
		return fmt.Errorf("--dp-size must be in [1, 256], got %d", n)
	}
	if p := c.SchedulingPolicy; p != "" && p != "fcfs" && p != "priority" {
		return fmt.Errorf("--scheduling-policy must be fcfs or priority, got %q", p)
	}
	if f := c.LogFormat; f != "" && f != "text" && f != "json" {
		return fmt.Errorf("--log-format must be text or json, got %q", f)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); c.LogLevel != "" && err != nil {
		return fmt.Errorf("--log-level must be debug, info, warn or error, got %q", c.LogLevel)
	}
	return nil
}

// Logger makes the process's slog logger (on stderr, as --log-format says) tagged with its
// process name. Check has refused a bad level or format; Logger falls back to info and text.
func (c *Config) Logger(process string) *slog.Logger {
	return c.logger(os.Stderr, process)
}

func (c *Config) logger(w io.Writer, process string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: jsonAttr})
	}
	l := slog.New(h).With("proc", process)
	slog.SetDefault(l)
	return l
}

// jsonAttr makes a JSON line's values what a log shipper can read: a duration is a number of
// seconds under a key ending in _seconds (slog writes nanoseconds), and an enum (an integer type
// with a String method) is its name, not its number.
func jsonAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		key := a.Key
		if !strings.HasSuffix(key, "_seconds") {
			key += "_seconds"
		}
		return slog.Float64(key, a.Value.Duration().Seconds())
	case slog.KindAny:
		v := a.Value.Any()
		if s, ok := v.(fmt.Stringer); ok {
			switch reflect.TypeOf(v).Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				return slog.String(a.Key, s.String())
			}
		}
	}
	return a
}

// RunDirPath is the run directory: --run-dir, else $XDG_RUNTIME_DIR (or /tmp)/llmserve-UID-PORT.
func (c *Config) RunDirPath() string {
	if c.RunDir != "" {
		return c.RunDir
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	return fmt.Sprintf("%s/llmserve-%d-%d", strings.TrimRight(base, "/"), os.Getuid(), c.Port)
}

// OpenRunDir returns the private run directory, creating it if needed.
func (c *Config) OpenRunDir() (string, error) {
	return ipc.RunDir(c.RunDirPath())
}

// OpenTransport returns the chosen ZMQ implementation.
func (c *Config) OpenTransport() (ipc.Transport, error) {
	if c.Transport != "" {
		return ipc.ByName(c.Transport)
	}
	return ipc.Default(), nil
}

// maxGBNFBytes bounds --grammar-max-gbnf-bytes: the text is parsed whole in memory, and a
// grammar anywhere near 64 MiB would take seconds to parse.
const maxGBNFBytes = 64 << 20

// GrammarOptions are the structured-output compiler's settings; every process that compiles
// grammars (each worker checks them, each rank enforces them) uses the same ones.
func (c *Config) GrammarOptions() (grammar.Options, error) {
	o := grammar.Options{Limits: grammar.Limits{MaxSchemaBytes: c.GrammarMaxSchemaBytes, MaxGBNFBytes: c.GrammarMaxGBNFBytes,
		MaxDepth: c.GrammarMaxDepth},
		Strict: c.GrammarStrict, CacheBytes: int64(c.GrammarCacheMB) << 20}
	switch ws := c.GrammarWhitespace; ws {
	case "compact":
		o.Whitespace = grammar.Compact
	case "flexible":
		o.Whitespace = grammar.Flexible
	default:
		return o, fmt.Errorf("--grammar-whitespace %q: want compact or flexible", ws)
	}
	if o.Limits.MaxSchemaBytes < 1 || o.Limits.MaxDepth < 1 || o.CacheBytes < 1 {
		return o, fmt.Errorf("--grammar-max-schema-bytes, --grammar-max-depth and --grammar-cache-mb must be >= 1")
	}
	if n := o.Limits.MaxGBNFBytes; n < 1 || n > maxGBNFBytes {
		return o, fmt.Errorf("--grammar-max-gbnf-bytes %d: want 1 to %d", n, maxGBNFBytes)
	}
	return o, nil
}

// ExitConflict is the exit status of a process that refused to start because of its
// configuration (EX_CONFIG): another engine holds its port or run directory, a flag or an
// environment variable has a bad value, the model cannot be loaded, the device does not exist.
// Supervisors do not restart it (systemd: RestartPreventExitStatus; cmd/procfile).
const ExitConflict = 78

// ConflictError says that another engine holds what this process needs.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// ConfigError is a configuration mistake a restart cannot fix; the process exits with
// ExitConflict.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// AsConfig marks err (nil stays nil) as a configuration error.
func AsConfig(err error) error {
	if err == nil {
		return nil
	}
	return &ConfigError{err}
}

// Configf is a configuration error built like fmt.Errorf.
func Configf(format string, args ...any) error {
	return &ConfigError{fmt.Errorf(format, args...)}
}

// ExitStatus is the status a binary exits with for err (nil: 0).
func ExitStatus(err error) int {
	var ce *ConflictError
	var cfg *ConfigError
	var refused *supervise.RefusedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce), errors.As(err, &cfg), errors.As(err, &refused):
		return ExitConflict
	}
	return 1
}

// actionError is an error a command's action returned, as opposed to one of the command line
// itself (an unknown flag, a bad value, a stray argument), which is a configuration error.
type actionError struct{ err error }

func (e *actionError) Error() string { return e.err.Error() }
func (e *actionError) Unwrap() error { return e.err }

// Main runs an engine binary's command line: cmd, stamped with the build's version, on os.Args;
// an error is printed after the command's name and ends the process with ExitStatus. Errors of
// the command line itself (an unknown flag, a value that does not parse, in a flag or in its
// environment variable) exit with ExitConflict too: restarting cannot fix them.
func Main(cmd *cli.Command) {
	cmd.Version = version.String()
	tagActions(cmd)
	fixDefaults(cmd)
	err := cmd.Run(context.Background(), os.Args)
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name, err)
	var ae *actionError
	if !errors.As(err, &ae) {
		os.Exit(ExitConflict)
	}
	os.Exit(ExitStatus(ae.err))
}

// tagActions wraps the actions of cmd and its subcommands so that Main can tell their errors
// from the command line's.
func tagActions(cmd *cli.Command) {
	if act := cmd.Action; act != nil {
		cmd.Action = func(ctx context.Context, c *cli.Command) error {
			if err := act(ctx, c); err != nil {
				return &actionError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands {
		tagActions(sub)
	}
}

// fixDefaults makes --help state each default once and correctly: a flag whose usage already
// says its default (one computed at run time) does not also print its zero value, and a boolean
// that defaults to true says so (the library prints no default for booleans).
func fixDefaults(cmd *cli.Command) {
	for _, f := range cmd.Flags {
		switch f := f.(type) {
		case *cli.BoolFlag:
			if f.Value && !strings.Contains(f.Usage, "default:") {
				f.Usage += " (default: true)"
			}
		case *cli.IntFlag:
			f.HideDefault = f.HideDefault || strings.Contains(f.Usage, "default:")
		case *cli.StringFlag:
			f.HideDefault = f.HideDefault || strings.Contains(f.Usage, "default:")
		case *cli.DurationFlag:
			f.HideDefault = f.HideDefault || strings.Contains(f.Usage, "default:")
		}
	}
	for _, sub := range cmd.Commands {
		fixDefaults(sub)
	}
}

// NoArgs refuses positional arguments a command does not take (a misplaced flag value, a
// model path given to a command that reads it from --model-path).
func NoArgs(cmd *cli.Command) error {
	if cmd.Args().Len() > 0 {
		return Configf("unexpected argument %q (flags go before or after, as --name value)", cmd.Args().First())
	}
	return nil
}

// ModelArg takes the model from a command's only positional argument (`serve MODEL`), as vLLM
// and llama.cpp do; it conflicts with a different --model-path given as a flag.
func (c *Config) ModelArg(cmd *cli.Command) error {
	args := cmd.Args().Slice()
	switch {
	case len(args) == 0:
		return nil
	case len(args) > 1:
		return Configf("unexpected arguments %q: give one model (a directory or a GGUF file), then flags", args[1:])
	case cmd.IsSet("model-path") && c.ModelPath != args[0]:
		return Configf("model %q given twice, differently: as an argument and as --model-path %q", args[0], c.ModelPath)
	}
	c.ModelPath = args[0]
	return nil
}

// LockRunDir takes role's exclusive lock in the run directory (role.lock, holding this
// process's pid) for as long as the process lives, so that a second engine started on the same
// run directory fails here, before it touches any socket, ledger or Procfile of the live one.
func LockRunDir(dir, role string) error {
	path := filepath.Join(dir, role+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lock run dir: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return &ConflictError{fmt.Sprintf("run dir %s is in use: a %s of another engine runs there (pid %s); stop it, or give this engine another --run-dir / --port",
				dir, role, strings.TrimSpace(string(pid)))}
		}
		return fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	heldLocks = append(heldLocks, f) // the lock lives as long as the descriptor
	return nil
}

// heldLocks keeps the lock files open for the life of the process.
var heldLocks []*os.File
