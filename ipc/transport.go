package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Errors returned by Sender and Receiver.
var (
	// ErrTimeout: Send found no room in the send queue within the send timeout (the peer is
	// gone or slow), or Recv got no message within its timeout.
	ErrTimeout = errors.New("ipc: timed out")
	// ErrClosed: the socket was closed.
	ErrClosed = errors.New("ipc: socket closed")
)

// Transport makes PUSH and PULL sockets. With bind, the socket listens on endpoint and any
// number of peers may connect; otherwise it connects to endpoint (before or after the peer
// binds; it reconnects when the peer restarts). A PULL fair-queues the messages of all its
// peers; a PUSH hands each message to exactly one of its peers.
type Transport interface {
	// Name is "libzmq" or "gozmq".
	Name() string
	Push(endpoint string, bind bool, opts ...Option) (Sender, error)
	Pull(endpoint string, bind bool, opts ...Option) (Receiver, error)
}

// Sender is the sending end of a PUSH socket. It is safe for concurrent use.
type Sender interface {
	// Send queues one frame for delivery. The frame is copied, so the caller may reuse it.
	// When the queue is full for the whole send timeout, Send returns ErrTimeout.
	Send(frame []byte) error
	// Connect adds a peer: the socket then load-balances over all its peers.
	Connect(endpoint string) error
	// Endpoint is the endpoint the socket was made with; for a tcp bind to port 0 it names
	// the port actually bound.
	Endpoint() string
	// Close discards queued messages (linger 0) and releases the socket.
	Close() error
}

// Receiver is the receiving end of a PULL socket. It is safe for concurrent use.
type Receiver interface {
	// Recv returns the next frame. It waits at most timeout (forever when timeout < 0,
	// not at all when 0) and returns ErrTimeout when nothing arrived; ErrClosed after Close.
	Recv(timeout time.Duration) ([]byte, error)
	// Connect adds a peer to receive from.
	Connect(endpoint string) error
	// Endpoint is as for Sender.
	Endpoint() string
	// Close discards queued messages and releases the socket.
	Close() error
}

// Options bound a socket's queues and waits.
type Options struct {
	// SendHWM is the number of messages a PUSH queues (per socket for gozmq, per peer for
	// libzmq) before Send waits.
	SendHWM int
	// RecvHWM is the number of messages a PULL queues before its peers must wait.
	RecvHWM int
	// SendTimeout is how long Send waits for queue room; 0 means not at all.
	SendTimeout time.Duration
	// Curve, when set, secures tcp:// endpoints with CURVE (a bound socket is the server, a
	// connecting one the client); ipc:// endpoints stay plain (the run directory's mode guards
	// them). Only libzmq has it.
	Curve *CurveKeys
}

// DefaultOptions are the options used when none are given.
var DefaultOptions = Options{SendHWM: 1000, RecvHWM: 1000, SendTimeout: 2 * time.Second}

// Option changes one of the Options.
type Option func(*Options)

// WithSendHWM sets Options.SendHWM (at least 1).
func WithSendHWM(n int) Option { return func(o *Options) { o.SendHWM = max(n, 1) } }

// WithRecvHWM sets Options.RecvHWM (at least 1).
func WithRecvHWM(n int) Option { return func(o *Options) { o.RecvHWM = max(n, 1) } }

// WithSendTimeout sets Options.SendTimeout (negative counts as 0).
func WithSendTimeout(d time.Duration) Option {
	return func(o *Options) { o.SendTimeout = max(d, 0) }
}

// WithCurve sets Options.Curve.
func WithCurve(k *CurveKeys) Option { return func(o *Options) { o.Curve = k } }

func buildOptions(opts []Option) Options {
	o := DefaultOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// transports holds the implementations compiled in, by name; libzmq registers itself under cgo.
var transports = map[string]Transport{"gozmq": gozmqTransport{}}

// Default returns libzmq when the binary is built with cgo, go-zeromq otherwise.
func Default() Transport {
	if t, ok := transports["libzmq"]; ok {
		return t
	}
	return transports["gozmq"]
}

// ByName returns the transport called name ("libzmq" or "gozmq").
func ByName(name string) (Transport, error) {
	if t, ok := transports[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("ipc: transport %q is not available in this build (have %s)", name, strings.Join(Names(), ", "))
}

// Names lists the transports compiled into this binary.
func Names() []string {
	names := make([]string, 0, len(transports))
	for n := range transports {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// maxIPCPath is the longest unix socket path Linux accepts (sun_path less the NUL).
const maxIPCPath = 107

// splitEndpoint checks an endpoint and returns its network ("unix" or "tcp") and address.
func splitEndpoint(endpoint string) (network, addr string, err error) {
	scheme, rest, ok := strings.Cut(endpoint, "://")
	switch {
	case !ok:
		return "", "", fmt.Errorf("ipc: endpoint %q: want ipc://path or tcp://host:port", endpoint)
	case scheme == "ipc":
		if rest == "" || len(rest) > maxIPCPath {
			return "", "", fmt.Errorf("ipc: endpoint %q: path must be 1..%d bytes", endpoint, maxIPCPath)
		}
		return "unix", rest, nil
	case scheme == "tcp":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", fmt.Errorf("ipc: endpoint %q: %w", endpoint, err)
		}
		return "tcp", rest, nil
	}
	return "", "", fmt.Errorf("ipc: endpoint %q: unsupported scheme %q (want ipc or tcp)", endpoint, scheme)
}

// RunDir makes dir (and its parents) if needed and checks that it is a private directory:
// not a symlink, owned by this user, mode 0700. Processes that share a run directory name
// their sockets in it with Endpoint.
func RunDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("run dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("run dir %s: %w", abs, err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("run dir %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("run dir %s: not a directory", abs)
	}
	if fi.Mode().Perm() != 0o700 {
		return "", fmt.Errorf("run dir %s: mode %v, want 0700 (others could reach our sockets)", abs, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("run dir %s: owned by uid %d, not %d", abs, st.Uid, os.Getuid())
	}
	return abs, nil
}

// TempRunDir creates a new private run directory under base (os.TempDir() when empty).
// The caller removes it when done.
func TempRunDir(base string) (string, error) {
	dir, err := os.MkdirTemp(base, "llmserve-")
	if err != nil {
		return "", fmt.Errorf("temp run dir: %w", err)
	}
	return RunDir(dir)
}

// Endpoint names the ipc:// socket called name inside run directory dir.
func Endpoint(dir, name string) string {
	return "ipc://" + filepath.Join(dir, name)
}

// claimIPCPath prepares a unix socket path for binding. A socket file left behind by a
// process that died is removed (libzmq would remove it too); one that still has a listener
// is an error, so two processes never silently steal each other's endpoint.
func claimIPCPath(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil // absent, or not a socket: let bind report any problem
	}
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("ipc: bind ipc://%s: another process is listening there", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ipc: remove stale socket %s: %w", path, err)
	}
	return nil
}
