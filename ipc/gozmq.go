package ipc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// gozmqTransport is the pure-Go transport. It speaks ZMTP 3: go-zeromq's Conn does the
// handshake (greeting, NULL security, socket-type check) and zmtp.go the message framing;
// listening, dialing, queueing and load balancing are ours, because go-zeromq's sockets copy
// every message to all peers of a PUSH, have no high-water marks, block forever writing to a
// peer that stopped reading, give up dialing after a few retries, report a peer's disconnect
// as a receive error, and allocate whatever frame size a peer announces.
//
// A PUSH keeps one bounded queue (SendHWM messages); one writer goroutine per live
// connection takes messages from it, so each message goes to exactly one peer and a peer
// that is gone or slow simply takes none. A PULL has one reader per connection feeding one
// bounded queue (RecvHWM). Delivery is at most once, as with libzmq: messages that were
// written to a connection that then breaks are lost.
type gozmqTransport struct{}

func (gozmqTransport) Name() string { return "gozmq" }

func (gozmqTransport) Push(endpoint string, bind bool, opts ...Option) (Sender, error) {
	o := buildOptions(opts)
	s := &goSender{queue: make(chan []byte, o.SendHWM)}
	s.init(zmq4.Push, o, s.serve)
	if err := s.attach(endpoint, bind); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (gozmqTransport) Pull(endpoint string, bind bool, opts ...Option) (Receiver, error) {
	o := buildOptions(opts)
	r := &goReceiver{in: make(chan []byte, o.RecvHWM)}
	r.init(zmq4.Pull, o, r.serve)
	if err := r.attach(endpoint, bind); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

const (
	handshakeTimeout = 5 * time.Second
	dialTimeout      = 2 * time.Second
	minRedial        = 10 * time.Millisecond
	maxRedial        = 100 * time.Millisecond
	connBufSize      = 64 << 10
)

// goSocket is what PUSH and PULL share: listeners, dialers and the set of live connections.
type goSocket struct {
	typ   zmq4.SocketType
	opts  Options
	ctx   context.Context
	stop  context.CancelFunc
	serve func(bc *bufConn) // runs one connection, after its handshake, until it breaks

	mu        sync.Mutex
	endpoint  string
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

func (s *goSocket) init(typ zmq4.SocketType, o Options, serve func(*bufConn)) {
	s.typ, s.opts, s.serve = typ, o, serve
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.conns = make(map[net.Conn]struct{})
}

func (s *goSocket) Endpoint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endpoint
}

func (s *goSocket) Connect(endpoint string) error { return s.attach(endpoint, false) }

// attach binds or connects. Connecting never fails for an absent peer: a goroutine keeps
// dialing until the peer is there, and again whenever the connection breaks.
func (s *goSocket) attach(endpoint string, bind bool) error {
	network, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return err
	}
	if network == "tcp" {
		// Traffic between hosts must be authenticated and encrypted (CURVE), which only the
		// libzmq transport does here: loopback only.
		if host, _, _ := net.SplitHostPort(addr); s.opts.Curve != nil || !isLoopbackHost(host) {
			return fmt.Errorf("ipc: %s: tcp:// beyond this host (or with CURVE keys) %w", endpoint, ErrNeedsCgo)
		}
	}
	if !bind {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ctx.Err() != nil { // checked under mu so that close never races wg.Add
			return ErrClosed
		}
		if s.endpoint == "" {
			s.endpoint = endpoint
		}
		s.wg.Add(1)
		go s.dialLoop(network, addr)
		return nil
	}
	if network == "unix" {
		if err := claimIPCPath(addr); err != nil {
			return err
		}
	} else if host, port, _ := net.SplitHostPort(addr); host == "*" {
		addr = net.JoinHostPort("", port)
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return fmt.Errorf("ipc: bind %s: %w", endpoint, err)
	}
	if network == "tcp" {
		endpoint = "tcp://" + ln.Addr().String()
	}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	s.listeners = append(s.listeners, ln)
	s.wg.Add(1)
	s.mu.Unlock()
	s.setEndpoint(endpoint)
	go s.acceptLoop(ln)
	return nil
}

func (s *goSocket) setEndpoint(ep string) {
	s.mu.Lock()
	if s.endpoint == "" {
		s.endpoint = ep
	}
	s.mu.Unlock()
}

func (s *goSocket) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off instead of spinning.
			slog.Warn("ipc: accept failed", "addr", ln.Addr().String(), "err", err)
			if !sleepCtx(s.ctx, maxRedial) {
				return
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(nc, true)
		}()
	}
}

func (s *goSocket) dialLoop(network, addr string) {
	defer s.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	wait := minRedial
	for s.ctx.Err() == nil {
		nc, err := d.DialContext(s.ctx, network, addr)
		if err != nil {
			if !sleepCtx(s.ctx, wait) {
				return
			}
			wait = min(2*wait, maxRedial)
			continue
		}
		wait = minRedial
		s.handle(nc, false)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// handle runs the ZMTP handshake on a new connection, then serves it until it breaks.
func (s *goSocket) handle(nc net.Conn, server bool) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.conns[nc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		nc.Close()
	}()

	bc := &bufConn{Conn: nc, r: bufio.NewReaderSize(nc, connBufSize), w: bufio.NewWriterSize(nc, connBufSize), autoFlush: true}
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := zmq4.Open(bc, null.Security(), s.typ, nil, server, nil); err != nil {
		if s.ctx.Err() == nil {
			slog.Debug("ipc: zmtp handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		}
		return
	}
	_ = nc.SetDeadline(time.Time{})
	s.serve(bc)
}

// close stops every goroutine and connection; queued messages are dropped (linger 0).
func (s *goSocket) close() {
	s.mu.Lock()
	s.stop()
	for _, ln := range s.listeners {
		ln.Close() // a unix listener also removes its socket file
	}
	for nc := range s.conns {
		nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// isDisconnect tells a peer going away from a protocol failure worth logging.
func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET)
}

// bufConn buffers a connection both ways so that a burst of small messages costs one write
// syscall. While autoFlush is set (the handshake, and all PULL connections, which only write
// replies to commands) every write goes out at once; a PUSH writer flushes when it runs out of
// queued messages.
type bufConn struct {
	net.Conn
	r         *bufio.Reader
	w         *bufio.Writer
	autoFlush bool
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *bufConn) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err == nil && c.autoFlush {
		err = c.w.Flush()
	}
	return n, err
}

// goSender is a PUSH socket.
type goSender struct {
	goSocket
	queue chan []byte

	retryMu sync.Mutex
	retry   [][]byte // taken from queue by a writer whose connection broke before writing them
}

func (s *goSender) Send(frame []byte) error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	if len(frame) > MaxFrameSize {
		return fmt.Errorf("send to %s: %d-byte frame exceeds MaxFrameSize", s.Endpoint(), len(frame))
	}
	f := make([]byte, len(frame))
	copy(f, frame)
	select {
	case s.queue <- f:
		return nil
	default:
	}
	if s.opts.SendTimeout <= 0 {
		return fmt.Errorf("send to %s: queue full: %w", s.Endpoint(), ErrTimeout)
	}
	t := time.NewTimer(s.opts.SendTimeout)
	defer t.Stop()
	select {
	case s.queue <- f:
		return nil
	case <-t.C:
		return fmt.Errorf("send to %s: queue full for %v: %w", s.Endpoint(), s.opts.SendTimeout, ErrTimeout)
	case <-s.ctx.Done():
		return ErrClosed
	}
}

func (s *goSender) Close() error {
	s.close()
	return nil
}

func (s *goSender) takeRetry() ([]byte, bool) {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	if len(s.retry) == 0 {
		return nil, false
	}
	f := s.retry[0]
	s.retry = s.retry[1:]
	return f, true
}

func (s *goSender) putRetry(f []byte) {
	s.retryMu.Lock()
	s.retry = append([][]byte{f}, s.retry...)
	s.retryMu.Unlock()
}

// serve writes queued messages to one connection until it breaks. A PUSH peer never sends
// us messages, so a read that returns means the peer is gone: the writer stops taking
// messages at once, leaving them to other (or reconnected) peers.
func (s *goSender) serve(bc *bufConn) {
	gone := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_, _ = io.Copy(io.Discard, bc.r)
		close(gone)
	}()
	bc.autoFlush = false
	for {
		f, ok := s.takeRetry()
		if !ok {
			select {
			case f = <-s.queue:
				ok = true
			default:
			}
		}
		if !ok {
			if bc.w.Flush() != nil {
				return
			}
			select {
			case f = <-s.queue:
			case <-gone:
				return
			case <-s.ctx.Done():
				return
			}
		}
		select {
		case <-gone:
			s.putRetry(f)
			return
		default:
		}
		if writeFrame(bc.w, f) != nil {
			return
		}
	}
}

// goReceiver is a PULL socket.
type goReceiver struct {
	goSocket
	in chan []byte
}

func (r *goReceiver) serve(bc *bufConn) {
	for {
		f, err := readMessage(bc.r)
		if err != nil {
			if r.ctx.Err() == nil && !isDisconnect(err) {
				slog.Warn("ipc: dropping connection", "endpoint", r.Endpoint(), "err", err)
			}
			return
		}
		select {
		case r.in <- f:
		case <-r.ctx.Done():
			return
		}
	}
}

func (r *goReceiver) Recv(timeout time.Duration) ([]byte, error) {
	if r.ctx.Err() != nil {
		return nil, ErrClosed
	}
	select {
	case f := <-r.in:
		return f, nil
	default:
	}
	if timeout == 0 {
		return nil, ErrTimeout
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case f := <-r.in:
		return f, nil
	case <-expired:
		return nil, ErrTimeout
	case <-r.ctx.Done():
		return nil, ErrClosed
	}
}

func (r *goReceiver) Close() error {
	r.close()
	return nil
}
