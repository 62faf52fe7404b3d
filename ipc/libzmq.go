//go:build cgo

package ipc

import (
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

func init() { transports["libzmq"] = libzmqTransport{} }

// libzmqTransport wraps libzmq sockets (the reference ZMQ implementation, via cgo). libzmq
// already has high-water marks, round-robin PUSH, fair-queued PULL and background
// reconnection; the wrapper adds a mutex (libzmq sockets are not thread-safe) and waits in
// short slices so that Close is never stuck behind a blocked Send or Recv.
type libzmqTransport struct{}

func (libzmqTransport) Name() string { return "libzmq" }

func (libzmqTransport) Push(endpoint string, bind bool, opts ...Option) (Sender, error) {
	s, err := newZSocket(zmq.PUSH, endpoint, bind, buildOptions(opts))
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (libzmqTransport) Pull(endpoint string, bind bool, opts ...Option) (Receiver, error) {
	s, err := newZSocket(zmq.PULL, endpoint, bind, buildOptions(opts))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// waitSlice bounds how long one libzmq call holds the socket mutex while waiting.
const waitSlice = 50 * time.Millisecond

type zSocket struct {
	mu sync.Mutex // guards everything below: libzmq sockets are not thread-safe
	// curveRole is "" until a tcp:// endpoint with Options.Curve sets it to "server" or
	// "client": one socket has one CURVE role.
	curveRole string
	// unwatch stops the handshake-failure logger of a CURVE server (nil otherwise).
	unwatch  func()
	sock     *zmq.Socket
	closed   bool
	endpoint string
	opts     Options
	sndtimeo time.Duration // values last set on sock, to skip redundant setsockopt calls
	rcvtimeo time.Duration
}

func newZSocket(typ zmq.Type, endpoint string, bind bool, o Options) (*zSocket, error) {
	sock, err := zmq.NewSocket(typ)
	if err != nil {
		return nil, fmt.Errorf("ipc: libzmq socket: %w", err)
	}
	s := &zSocket{sock: sock, opts: o, sndtimeo: -1, rcvtimeo: -1}
	for _, set := range []func() error{
		func() error { return sock.SetLinger(0) },
		func() error { return sock.SetSndhwm(o.SendHWM) },
		func() error { return sock.SetRcvhwm(o.RecvHWM) },
		func() error { return sock.SetReconnectIvl(minRedial) },
		func() error { return sock.SetReconnectIvlMax(maxRedial) },
		func() error { return sock.SetMaxmsgsize(MaxFrameSize) },
	} {
		if err := set(); err != nil {
			sock.Close()
			return nil, fmt.Errorf("ipc: libzmq socket options: %w", err)
		}
	}
	if err := s.attach(endpoint, bind); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *zSocket) attach(endpoint string, bind bool) error {
	network, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if network == "tcp" && s.opts.Curve != nil {
		role := map[bool]string{true: "server", false: "client"}[bind]
		switch s.curveRole {
		case "":
			if err := setCurve(s.sock, s.opts.Curve, bind); err != nil {
				return err
			}
			s.curveRole = role
			if bind {
				if s.unwatch, err = watchHandshakes(s.sock, endpoint); err != nil {
					return err
				}
			}
		case role:
		default:
			return fmt.Errorf("ipc: %s: a CURVE %s socket cannot also be a %s", endpoint, s.curveRole, role)
		}
	}
	if !bind {
		if err := s.sock.Connect(endpoint); err != nil {
			return fmt.Errorf("ipc: connect %s: %w", endpoint, err)
		}
	} else {
		if network == "unix" {
			if err := claimIPCPath(addr); err != nil {
				return err
			}
		}
		if err := s.sock.Bind(endpoint); err != nil {
			return fmt.Errorf("ipc: bind %s: %w", endpoint, err)
		}
		if network == "tcp" {
			if _, port, _ := net.SplitHostPort(addr); port == "0" || port == "*" {
				if last, err := s.sock.GetLastEndpoint(); err == nil {
					endpoint = last
				}
			}
		}
	}
	if s.endpoint == "" {
		s.endpoint = endpoint
	}
	return nil
}

func (s *zSocket) Connect(endpoint string) error { return s.attach(endpoint, false) }

func (s *zSocket) Endpoint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endpoint
}

func isEAGAIN(err error) bool { return zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) }

func (s *zSocket) Send(frame []byte) error {
	if len(frame) > MaxFrameSize {
		return fmt.Errorf("send to %s: %d-byte frame exceeds MaxFrameSize", s.Endpoint(), len(frame))
	}
	deadline := time.Now().Add(s.opts.SendTimeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return ErrClosed
		}
		_, err := s.sock.SendBytes(frame, zmq.DONTWAIT)
		if err == nil {
			return nil
		}
		if !isEAGAIN(err) {
			return fmt.Errorf("send to %s: %w", s.endpoint, err)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("send to %s: queue full for %v: %w", s.endpoint, s.opts.SendTimeout, ErrTimeout)
		}
		if err := s.setSndtimeo(min(left, waitSlice)); err != nil {
			return err
		}
		if _, err = s.sock.SendBytes(frame, 0); err == nil {
			return nil
		}
		if !isEAGAIN(err) {
			return fmt.Errorf("send to %s: %w", s.endpoint, err)
		}
		// Let Close (or another sender) in between slices.
		s.mu.Unlock()
		s.mu.Lock()
	}
}

func (s *zSocket) Recv(timeout time.Duration) ([]byte, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.closed {
			return nil, ErrClosed
		}
		b, err := s.sock.RecvBytes(zmq.DONTWAIT)
		if err == nil {
			return b, nil
		}
		if !isEAGAIN(err) {
			return nil, fmt.Errorf("recv on %s: %w", s.endpoint, err)
		}
		slice := waitSlice
		if timeout == 0 {
			return nil, ErrTimeout
		} else if timeout > 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return nil, ErrTimeout
			}
			slice = min(left, waitSlice)
		}
		if err := s.setRcvtimeo(slice); err != nil {
			return nil, err
		}
		if b, err = s.sock.RecvBytes(0); err == nil {
			return b, nil
		}
		if !isEAGAIN(err) {
			return nil, fmt.Errorf("recv on %s: %w", s.endpoint, err)
		}
		s.mu.Unlock()
		s.mu.Lock()
	}
}

// setSndtimeo and setRcvtimeo round up to whole milliseconds (libzmq's unit), never to 0,
// which would mean "don't wait".
func (s *zSocket) setSndtimeo(d time.Duration) error {
	d = max(d.Round(time.Millisecond), time.Millisecond)
	if d == s.sndtimeo {
		return nil
	}
	if err := s.sock.SetSndtimeo(d); err != nil {
		return fmt.Errorf("ipc: set send timeout: %w", err)
	}
	s.sndtimeo = d
	return nil
}

func (s *zSocket) setRcvtimeo(d time.Duration) error {
	d = max(d.Round(time.Millisecond), time.Millisecond)
	if d == s.rcvtimeo {
		return nil
	}
	if err := s.sock.SetRcvtimeo(d); err != nil {
		return fmt.Errorf("ipc: set recv timeout: %w", err)
	}
	s.rcvtimeo = d
	return nil
}

func (s *zSocket) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.unwatch != nil {
		s.unwatch()
	}
	if err := s.sock.Close(); err != nil {
		return fmt.Errorf("ipc: close %s: %w", s.endpoint, err)
	}
	return nil
}
