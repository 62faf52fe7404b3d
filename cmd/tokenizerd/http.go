package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/metrics"
	"golang.org/x/sys/unix"
)

// serveHTTP serves srv on the shared port until ctx ends, then drains: it stops accepting, lets
// requests in flight finish for --shutdown-timeout, ends the rest cleanly (srv.Stop) and gives
// them a moment to write their last event before the connections close.
func serveHTTP(ctx context.Context, cfg *serveConfig, srv *api.Server, lim *api.ConnLimiter, log *slog.Logger) error {
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		WriteTimeout:      cfg.WriteTimeout, // generation handlers move it forward before each write
		IdleTimeout:       cfg.IdleTimeout,
		ConnState:         lim.Track,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn), // accept errors, panics in handlers
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lim) }()
	log.Info("tokenizer worker ready", "addr", lim.Addr().String(), "max_connections", lim.Max)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Readiness goes first: /health turns 503 while the worker still serves, for --drain-delay,
	// so a gateway or Kubernetes endpoint controller stops sending before connections are refused.
	srv.SetDraining()
	if cfg.DrainDelay > 0 {
		log.Info("shutting down: /health answers 503; still serving", "drain_delay", cfg.DrainDelay)
		time.Sleep(cfg.DrainDelay)
	}
	log.Info("draining: no new connections; requests in flight may finish", "shutdown_timeout", cfg.ShutdownTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	err := hs.Shutdown(dctx)
	cancel()
	if err == nil {
		log.Info("drained")
		return nil
	}
	log.Warn("shutdown timeout: ending the requests still in flight")
	srv.Stop()
	dctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if hs.Shutdown(dctx) != nil && dctx.Err() != nil {
		return hs.Close()
	}
	return nil
}

// listenHTTP opens the worker's listener on the shared port, bounded by --max-connections, and
// registers its connection series (per worker, served by every worker: see metrics.Publish).
func listenHTTP(ctx context.Context, cfg *serveConfig, reg *metrics.Registry) (*api.ConnLimiter, error) {
	ln, err := listenReusePort(ctx, cfg.addr())
	if err != nil {
		return nil, err
	}
	lim := api.NewConnLimiter(ln, maxConnections(cfg.MaxConnections))
	lim.SendBuffer = api.DefaultSendBuffer
	reg.NewWorkerGaugeFunc("llm_http_connections_open", "Open HTTP connections.", nil, func() float64 { return float64(lim.Open()) })
	reg.NewWorkerCounterFunc("llm_http_connections_shed_total", "Idle connections closed to admit new ones at --max-connections.", nil,
		func() float64 { return float64(lim.Shed()) })
	reg.NewWorkerCounterFunc("llm_http_connections_refused_total", "New connections refused at --max-connections, every open one busy.", nil,
		func() float64 { return float64(lim.Refused()) })
	return lim, nil
}

// maxConnections is --max-connections, or the descriptor limit less a reserve for the worker's
// own sockets and files.
func maxConnections(flag int) int {
	if flag > 0 {
		return flag
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 20
	}
	return max(64, int(rl.Cur)-256)
}

// lockPort claims the HTTP port for this engine for as long as the supervisor lives. SO_REUSEPORT
// lets any process of the same user bind the port, so without a claim a second engine would
// start without error and take half the connections. The claim is an abstract unix socket
// named after the port (one engine per port in a network namespace, like the port itself),
// which the kernel frees when the process dies, however it dies. A trial listen then checks
// that no other program holds the port.
//
// Port 0 asks the kernel for a free port: the trial listen picks it first, and cfg.Port becomes
// that port, which every worker is then given (each asking for port 0 would get its own).
func lockPort(ctx context.Context, cfg *serveConfig) (net.Listener, error) {
	if cfg.Port == 0 {
		trial, err := listenReusePort(ctx, cfg.addr())
		if err != nil {
			return nil, listenError(cfg, err)
		}
		cfg.Port = trial.Addr().(*net.TCPAddr).Port
		trial.Close()
	}
	name := fmt.Sprintf("@llmserve-port-%d", cfg.Port)
	claim, err := net.Listen("unix", name)
	if err != nil {
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("claim port %d: %w", cfg.Port, err)
		}
		holder := "another engine"
		if pid := peerPID(name); pid > 0 {
			holder = fmt.Sprintf("another engine (its tokenizerd is pid %d)", pid)
		}
		return nil, &runflags.ConflictError{Msg: fmt.Sprintf("port %d is in use by %s; stop it, or give this engine another --port", cfg.Port, holder)}
	}
	trial, err := listenReusePort(ctx, cfg.addr())
	if err != nil {
		claim.Close()
		return nil, listenError(cfg, err)
	}
	trial.Close()
	return claim, nil
}

// listenError says why the HTTP address cannot be listened on: another program holds the port,
// or the address itself is wrong (a host that does not resolve or is not this machine's, a
// privileged port). Either way restarting cannot help (exit status 78).
func listenError(cfg *serveConfig, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return &runflags.ConflictError{Msg: fmt.Sprintf("port %d: %v (another program holds it)", cfg.Port, err)}
	}
	return &runflags.ConflictError{Msg: fmt.Sprintf("cannot listen on --host %q --port %d: %v", cfg.Host, cfg.Port, err)}
}

// peerPID is the pid of the process listening on the unix socket name (0 if unknown).
func peerPID(name string) int {
	c, err := net.Dial("unix", name)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
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
