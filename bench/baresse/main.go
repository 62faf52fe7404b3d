// Command baresse is the bare SSE ceiling: an HTTP server with no engine that answers the
// OpenAI completion endpoints with pre-formatted streams of deterministic token ids, one chunk
// per token, so that loadgen against it measures what the HTTP + SSE path alone can carry on a
// machine.
//
//	go run ./bench/baresse -addr 127.0.0.1:30000
//	go run ./bench/loadgen -url http://127.0.0.1:30000 -concurrency 512 -expect-sequence prompt:1,8192
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/bench/internal/bareserver"
	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "baresse:", err)
		os.Exit(2)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("baresse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:30000", "listen address")
	model := fs.String("model", "baresse", "model name served and echoed")
	vocab := fs.Int("vocab", 8192, "token ids are below this (the sequence's modulus unless -sequence is set)")
	seqSpec := fs.String("sequence", "", "id sequence: prompt:STEP,MOD or affine:START,STEP,MOD (default prompt:1,VOCAB)")
	interval := fs.Duration("token-interval", 0, "delay before each token, standing in for a decode step")
	defMax := fs.Int("default-max-tokens", 16, "max_tokens when a request sets none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *seqSpec == "" {
		*seqSpec = fmt.Sprintf("prompt:1,%d", *vocab)
	}
	seq, err := tokseq.Parse(*seqSpec)
	if err != nil {
		return fmt.Errorf("-sequence: %w", err)
	}
	srv, err := bareserver.New(bareserver.Config{Model: *model, Sequence: seq, TokenInterval: *interval, DefaultMaxTokens: *defMax})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	log.Info("baresse listening", "addr", ln.Addr().String(), "model", *model, "sequence", seq.String(), "token_interval", *interval)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("baresse stopped", "served", srv.Served())
	return nil
}
