// Package runflags holds the flags every engine binary shares (model, run directory, process
// counts, modes, transport, logging), each with its environment-variable fallback, so that the
// Procfile, systemd units and `make run` configure all processes the same way.
package runflags

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

// Common returns the shared flags.
func Common() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model-path", Value: "models/pico", Usage: "Hugging Face model directory, or a GGUF file", Sources: cli.EnvVars("MODEL_PATH")},
		&cli.StringFlag{Name: "run-dir", Usage: "private directory (0700) holding the ipc sockets; default: $XDG_RUNTIME_DIR or /tmp, /llmserve-UID-PORT", Sources: cli.EnvVars("LLMSERVE_RUN_DIR")},
		&cli.IntFlag{Name: "port", Value: 30000, Usage: "HTTP port (also names the default run dir)", Sources: cli.EnvVars("LLMSERVE_PORT", "PORT")},
		&cli.IntFlag{Name: "tokenizer-worker-num", Value: 1, Usage: "tokenizer worker processes", Sources: cli.EnvVars("TOKENIZER_WORKERS")},
		&cli.IntFlag{Name: "dp-size", Value: 1, Usage: "data-parallel ranks (schedulerd processes)", Sources: cli.EnvVars("DP_SIZE")},
		&cli.BoolFlag{Name: "skip-detokenization", Usage: "no detokd: workers detokenize the requests they own", Sources: cli.EnvVars("SKIP_DETOKENIZATION")},
		&cli.BoolFlag{Name: "skip-tokenizer-init", Usage: "no tokenizer anywhere: token ids in and out only", Sources: cli.EnvVars("SKIP_TOKENIZER_INIT")},
		&cli.StringFlag{Name: "transport", Usage: "ZMQ implementation: libzmq (cgo builds) or gozmq; default: the best in this build", Sources: cli.EnvVars("LLMSERVE_TRANSPORT")},
		&cli.IntFlag{Name: "grammar-max-schema-bytes", Value: 1 << 20, Usage: "largest JSON schema or regex accepted for structured output", Sources: cli.EnvVars("GRAMMAR_MAX_SCHEMA_BYTES")},
		&cli.IntFlag{Name: "grammar-max-depth", Value: 64, Usage: "deepest schema nesting accepted for structured output", Sources: cli.EnvVars("GRAMMAR_MAX_DEPTH")},
		&cli.IntFlag{Name: "grammar-cache-mb", Value: 64, Usage: "memory the compiled-grammar cache may hold, their DFA and masks included (MiB; least recently used dropped first)", Sources: cli.EnvVars("GRAMMAR_CACHE_MB")},
		&cli.StringFlag{Name: "grammar-whitespace", Value: "compact", Usage: "JSON whitespace structured output allows: compact or flexible", Sources: cli.EnvVars("GRAMMAR_WHITESPACE")},
		&cli.BoolFlag{Name: "grammar-strict", Value: true, Usage: "schemas that list properties allow no other keys unless additionalProperties says so (and tuples no extra items), as in OpenAI's strict mode; false: JSON Schema's permissive defaults", Sources: cli.EnvVars("GRAMMAR_STRICT")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("LOG_LEVEL")},
	}
}

// Logger makes the process's slog logger (text lines on stderr) tagged with its process name.
func Logger(cmd *cli.Command, process string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(cmd.String("log-level"))); err != nil {
		lvl = slog.LevelInfo
	}
	l := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("proc", process)
	slog.SetDefault(l)
	return l
}

// RunDir returns the private run directory, creating it if needed.
func RunDir(cmd *cli.Command) (string, error) {
	dir := cmd.String("run-dir")
	if dir == "" {
		base := os.Getenv("XDG_RUNTIME_DIR")
		if base == "" {
			base = os.TempDir()
		}
		dir = fmt.Sprintf("%s/llmserve-%d-%d", strings.TrimRight(base, "/"), os.Getuid(), cmd.Int("port"))
	}
	return ipc.RunDir(dir)
}

// Transport returns the chosen ZMQ implementation.
func Transport(cmd *cli.Command) (ipc.Transport, error) {
	if name := cmd.String("transport"); name != "" {
		return ipc.ByName(name)
	}
	return ipc.Default(), nil
}

// Check validates the process counts.
func Check(cmd *cli.Command) error {
	if n := cmd.Int("tokenizer-worker-num"); n < 1 || n > 256 {
		return fmt.Errorf("--tokenizer-worker-num must be in [1, 256], got %d", n)
	}
	if n := cmd.Int("dp-size"); n < 1 || n > 256 {
		return fmt.Errorf("--dp-size must be in [1, 256], got %d", n)
	}
	return nil
}

// GrammarOptions are the structured-output compiler's settings; every process that compiles
// grammars (each worker checks them, each rank enforces them) uses the same ones.
func GrammarOptions(cmd *cli.Command) (grammar.Options, error) {
	o := grammar.Options{Limits: grammar.Limits{MaxSchemaBytes: int(cmd.Int("grammar-max-schema-bytes")), MaxDepth: int(cmd.Int("grammar-max-depth"))},
		Strict: cmd.Bool("grammar-strict"), CacheBytes: int64(cmd.Int("grammar-cache-mb")) << 20}
	switch ws := cmd.String("grammar-whitespace"); ws {
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
	return o, nil
}

// GrammarEOS is the token ids that end a constrained output: the model's EOS ids
// (model.EOSTokenIDs) and the tokenizer's.
func GrammarEOS(modelEOS []int32, tok *tokenizer.Tokenizer) []int32 {
	eos := slices.Clone(modelEOS)
	if id, ok := tok.EOS(); ok && !slices.Contains(eos, id) {
		eos = append(eos, id)
	}
	return eos
}

// ModelEOS reads the model's EOS ids from dir (generation_config.json, else config.json);
// none when neither can be read.
func ModelEOS(dir string) []int32 {
	cfg, _ := model.LoadConfig(dir) // a tokenizer-only dir has no config.json
	eos, _ := model.EOSTokenIDs(dir, cfg)
	return eos
}
