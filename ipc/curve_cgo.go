//go:build cgo

package ipc

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// NewCurveKeys makes a fresh keypair.
func NewCurveKeys() (*CurveKeys, error) {
	pub, sec, err := zmq.NewCurveKeypair()
	if err != nil {
		return nil, fmt.Errorf("keygen: %w (libzmq built without CURVE?)", err)
	}
	return &CurveKeys{Public: pub, Secret: sec}, nil
}

// check verifies that the public key is the secret key's.
func (k *CurveKeys) check() error {
	pub, err := zmq.AuthCurvePublic(k.Secret)
	if err != nil {
		return fmt.Errorf("derive public key: %w", err)
	}
	if pub != k.Public {
		return errors.New("the public key is not the secret key's (files from two keygen runs?)")
	}
	return nil
}

// zapDomain is the ZAP domain of the engine's CURVE servers.
const zapDomain = "llmserve"

// zap is the process's ZAP handler (ZeroMQ's authentication protocol, RFC 27): libzmq asks it,
// over inproc, whether to admit each CURVE client that completed the key exchange.
var zap struct {
	once    sync.Once
	err     error
	mu      sync.Mutex      // guards allowed and log
	allowed map[string]bool // Z85 client public keys admitted
	log     *slog.Logger
}

// startZAP admits k's public key from now on, starting the handler on first use.
func startZAP(k *CurveKeys) error {
	zap.once.Do(func() {
		zap.allowed = map[string]bool{}
		rep, err := zmq.NewSocket(zmq.REP)
		if err != nil {
			zap.err = fmt.Errorf("ipc: zap handler: %w", err)
			return
		}
		if err := rep.Bind("inproc://zeromq.zap.01"); err != nil {
			rep.Close()
			zap.err = fmt.Errorf("ipc: zap handler: %w", err)
			return
		}
		go serveZAP(rep)
	})
	if zap.err != nil {
		return zap.err
	}
	zap.mu.Lock()
	zap.allowed[k.Public] = true
	zap.mu.Unlock()
	return nil
}

// SetSecurityLogger sets where refused peers are logged (slog.Default when unset).
func SetSecurityLogger(l *slog.Logger) {
	zap.mu.Lock()
	zap.log = l
	zap.mu.Unlock()
}

func securityLog() *slog.Logger {
	zap.mu.Lock()
	defer zap.mu.Unlock()
	if zap.log != nil {
		return zap.log
	}
	return slog.Default()
}

// serveZAP answers ZAP requests for the life of the process.
func serveZAP(rep *zmq.Socket) {
	for {
		msg, err := rep.RecvMessageBytes(0)
		if err != nil {
			if zmq.AsErrno(err) == zmq.ETERM {
				return
			}
			continue
		}
		// version, request id, domain, address, identity, mechanism, credentials...
		if len(msg) < 6 {
			continue
		}
		status, text := "400", "no credentials"
		domain, addr, mech := string(msg[2]), string(msg[3]), string(msg[5])
		var key string
		switch {
		case domain != zapDomain:
			// Not one of our CURVE servers: libzmq asks about every NULL socket too once a
			// handler exists (ipc:// sockets in the private run directory, the KV-event
			// publisher), and those are not this handler's to refuse.
			status, text = "200", "OK"
		case mech == "CURVE" && len(msg) >= 7 && len(msg[6]) == 32:
			key = zmq.Z85encode(string(msg[6]))
			zap.mu.Lock()
			ok := zap.allowed[key]
			zap.mu.Unlock()
			if ok {
				status, text = "200", "OK"
			} else {
				text = "client key not admitted"
			}
		}
		if status != "200" {
			securityLog().Warn("refused peer: CURVE client key not admitted (ZAP)", "peer", addr, "mechanism", mech, "client_key", key)
		}
		if _, err := rep.SendMessage(msg[0], msg[1], status, text, "", ""); err != nil {
			securityLog().Error("zap reply", "err", err)
		}
	}
}

// setCurve makes sock a CURVE server (bind) or client (connect) with keys k.
func setCurve(sock *zmq.Socket, k *CurveKeys, bind bool) error {
	if !zmq.HasCurve() {
		return errors.New("ipc: this libzmq was built without CURVE")
	}
	if bind {
		if err := startZAP(k); err != nil {
			return err
		}
		if err := sock.SetZapDomain(zapDomain); err != nil {
			return fmt.Errorf("ipc: zap domain: %w", err)
		}
		if err := sock.SetCurveServer(1); err != nil {
			return fmt.Errorf("ipc: curve server: %w", err)
		}
		if err := sock.SetCurveSecretkey(k.Secret); err != nil {
			return fmt.Errorf("ipc: curve secret key: %w", err)
		}
		return nil
	}
	if err := sock.ClientAuthCurve(k.Public, k.Public, k.Secret); err != nil {
		return fmt.Errorf("ipc: curve client: %w", err)
	}
	return nil
}

// monitorSeq names each monitor's inproc endpoint.
var monitorSeq struct {
	mu sync.Mutex // guards n
	n  int
}

func monitorEndpoint() string {
	monitorSeq.mu.Lock()
	defer monitorSeq.mu.Unlock()
	monitorSeq.n++
	return fmt.Sprintf("inproc://llmserve.monitor.%d", monitorSeq.n)
}

// monitor reads a socket's events (zmq_socket_monitor). libzmq writes each event from its I/O
// thread with a blocking send: an event that finds the reader gone blocks that thread for good,
// and with it every socket of the process (CI saw every later handshake hang). So stop turns
// libzmq's side off before it closes the reader, and a monitor never asks for
// EVENT_MONITOR_STOPPED (stopping would send it into a pipe nobody may read).
type monitor struct {
	sock   *zmq.Socket // the watched socket; stop must run on the goroutine that owns it
	reader *zmq.Socket // the PAIR the events arrive on
}

// startMonitor makes sock report events to a new reader.
func startMonitor(sock *zmq.Socket, events zmq.Event) (*monitor, error) {
	ep := monitorEndpoint()
	if err := sock.Monitor(ep, events&^zmq.EVENT_MONITOR_STOPPED); err != nil {
		return nil, err
	}
	reader, err := zmq.NewSocket(zmq.PAIR)
	if err == nil {
		err = reader.Connect(ep)
	}
	if err != nil {
		_ = sock.Monitor("", 0)
		if reader != nil {
			reader.Close()
		}
		return nil, err
	}
	return &monitor{sock: sock, reader: reader}, nil
}

// stopEvents turns libzmq's side off: no event is written after it returns.
func (m *monitor) stopEvents() { _ = m.sock.Monitor("", 0) }

// stop turns events off, then closes the reader.
func (m *monitor) stop() {
	m.stopEvents()
	m.reader.Close()
}

// watchHandshakes logs, for the life of sock, every peer whose handshake failed (a wrong key).
// It returns a function that stops the watcher; call it before closing sock, on the goroutine
// that owns sock.
func watchHandshakes(sock *zmq.Socket, endpoint string) (func(), error) {
	m, err := startMonitor(sock, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL|zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL|zmq.EVENT_HANDSHAKE_FAILED_AUTH)
	if err != nil {
		return nil, fmt.Errorf("ipc: monitor %s: %w", endpoint, err)
	}
	_ = m.reader.SetRcvtimeo(waitSlice)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var logged time.Time // when the last line was written
		refused := 0         // handshakes failed since
		for {
			select {
			case <-done:
				return
			default:
			}
			ev, addr, val, err := m.reader.RecvEvent(0)
			if err != nil {
				continue
			}
			// A refused peer redials every 100 ms: one line a second, with how many since.
			refused++
			if time.Since(logged) < time.Second {
				continue
			}
			securityLog().Warn("refused peer: CURVE handshake failed (it lacks this engine's keys)", "endpoint", endpoint, "peer", addr,
				"event", ev.String(), "code", val, "refused_since_last_line", refused)
			logged, refused = time.Now(), 0
		}
	}()
	return func() {
		// Events off while the reader still drains; the reader closes only after its goroutine
		// has left it (a zmq socket belongs to one goroutine at a time).
		m.stopEvents()
		close(done)
		<-stopped
		m.reader.Close()
	}, nil
}

// Probe connects to a peer's bound tcp:// endpoint as a CURVE client and waits up to timeout
// for the handshake, so that a process fails at start, naming why, instead of sending into a
// socket that never connects: the address is unreachable (the dial's error), the peer refused
// our key, or it never answered. A peer that is not up yet is retried until timeout.
func Probe(endpoint string, k *CurveKeys, timeout time.Duration) error {
	network, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return err
	}
	if network != "tcp" {
		return nil
	}
	deadline := time.Now().Add(timeout)
	// Reachability first: the dial names the reason (refused, no route, DNS, timeout).
	var dialErr error
	for {
		c, err := net.DialTimeout("tcp", addr, min(time.Until(deadline), 2*time.Second))
		if err == nil {
			c.Close()
			break
		}
		dialErr = err
		if time.Until(deadline) < 200*time.Millisecond {
			return fmt.Errorf("peer %s unreachable for %v: %w", endpoint, timeout, dialErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if k == nil {
		return nil
	}
	sock, err := zmq.NewSocket(zmq.PUSH)
	if err != nil {
		return fmt.Errorf("probe %s: %w", endpoint, err)
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	if err := setCurve(sock, k, false); err != nil {
		return err
	}
	m, err := startMonitor(sock, zmq.EVENT_CONNECTED|zmq.EVENT_DISCONNECTED|zmq.EVENT_HANDSHAKE_SUCCEEDED|
		zmq.EVENT_HANDSHAKE_FAILED_AUTH|zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL|zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
	if err != nil {
		return fmt.Errorf("probe %s: %w", endpoint, err)
	}
	defer m.stop() // before sock.Close (defers run last first): closing sock emits events
	mon := m.reader
	if err := sock.Connect(endpoint); err != nil {
		return fmt.Errorf("probe %s: %w", endpoint, err)
	}
	connected, drops := false, 0
	for {
		left := time.Until(deadline)
		if left <= 0 {
			if connected {
				return fmt.Errorf("peer %s: CURVE handshake did not complete within %v: it closed the connection %d times (it does not hold this engine's keys)", endpoint, timeout, drops)
			}
			return fmt.Errorf("peer %s: no connection within %v", endpoint, timeout)
		}
		_ = mon.SetRcvtimeo(min(left, waitSlice))
		ev, _, val, err := mon.RecvEvent(0)
		if err != nil {
			continue
		}
		switch ev {
		case zmq.EVENT_HANDSHAKE_SUCCEEDED:
			return nil
		case zmq.EVENT_HANDSHAKE_FAILED_AUTH:
			return fmt.Errorf("peer %s refused our CURVE key (ZAP status %d): this process holds other keys than the engine's", endpoint, val)
		case zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
			return fmt.Errorf("peer %s: CURVE handshake failed (protocol error %#x): the peer holds other keys than ours", endpoint, val)
		case zmq.EVENT_CONNECTED:
			connected = true
		case zmq.EVENT_DISCONNECTED:
			drops++
			// A server that cannot open our hello (another server key) closes the connection
			// without a word; twice is no accident.
			if drops >= 2 {
				return fmt.Errorf("peer %s closed the connection during the CURVE handshake %d times: it does not hold the keys we hold (wrong --curve-keys on one side)", endpoint, drops)
			}
		}
	}
}
