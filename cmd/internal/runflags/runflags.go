// Package runflags holds the flags every engine binary shares (model, run directory, process
// counts, modes, transport, logging), each with its environment-variable fallback, so that the
// Procfile, systemd units and `make run` configure all processes the same way.
package runflags

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/llmserve/llmserve/ipc"
	"github.com/urfave/cli/v3"
)

// Common returns the shared flags.
func Common() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model-path", Value: "models/pico", Usage: "Hugging Face model directory", Sources: cli.EnvVars("MODEL_PATH")},
		&cli.StringFlag{Name: "run-dir", Usage: "private directory (0700) holding the ipc sockets; default: $XDG_RUNTIME_DIR or /tmp, /llmserve-UID-PORT", Sources: cli.EnvVars("LLMSERVE_RUN_DIR")},
		&cli.IntFlag{Name: "port", Value: 30000, Usage: "HTTP port (also names the default run dir)", Sources: cli.EnvVars("PORT")},
		&cli.IntFlag{Name: "tokenizer-worker-num", Value: 1, Usage: "tokenizer worker processes", Sources: cli.EnvVars("TOKENIZER_WORKERS")},
		&cli.IntFlag{Name: "dp-size", Value: 1, Usage: "data-parallel ranks (schedulerd processes)", Sources: cli.EnvVars("DP_SIZE")},
		&cli.BoolFlag{Name: "skip-detokenization", Usage: "no detokd: workers detokenize the requests they own", Sources: cli.EnvVars("SKIP_DETOKENIZATION")},
		&cli.BoolFlag{Name: "skip-tokenizer-init", Usage: "no tokenizer anywhere: token ids in and out only", Sources: cli.EnvVars("SKIP_TOKENIZER_INIT")},
		&cli.StringFlag{Name: "transport", Usage: "ZMQ implementation: libzmq (cgo builds) or gozmq; default: the best in this build", Sources: cli.EnvVars("LLMSERVE_TRANSPORT")},
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
