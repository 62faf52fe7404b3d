//go:build cgo

package ipc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

func mustKeys(t *testing.T) *CurveKeys {
	t.Helper()
	k, err := NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCurveKeysRoundTrip(t *testing.T) {
	dir := t.TempDir() + "/keys"
	k := mustKeys(t)
	if err := WriteCurveKeys(dir, k); err != nil {
		t.Fatal(err)
	}
	if err := WriteCurveKeys(dir, mustKeys(t)); err == nil {
		t.Fatal("keygen overwrote existing keys")
	}
	got, err := LoadCurveKeys(dir)
	if err != nil || *got != *k {
		t.Fatalf("load = %+v, %v; want %+v", got, err, k)
	}
	// A public key from another pair is caught at load, not at the first handshake.
	other := mustKeys(t)
	dir2 := t.TempDir()
	if err := WriteCurveKeys(dir2, &CurveKeys{Public: other.Public, Secret: k.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCurveKeys(dir2); err == nil || !strings.Contains(err.Error(), "not the secret key's") {
		t.Fatalf("mismatched pair: err = %v", err)
	}
}

// TestCurveTransport sends over CURVE with the engine's keys and checks that a peer with other
// keys neither gets through nor passes Probe, which names why.
func TestCurveTransport(t *testing.T) {
	k := mustKeys(t)
	tr := Default()
	pull, err := tr.Pull("tcp://127.0.0.1:0", true, WithCurve(k))
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	ep := pull.Endpoint()
	if err := Probe(ep, k, 20*time.Second); err != nil {
		t.Fatalf("probe with the engine's keys: %v", err)
	}
	push, err := tr.Push(ep, false, WithCurve(k))
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Send([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := pull.Recv(20 * time.Second); err != nil || string(b) != "hello" {
		t.Fatalf("recv = %q, %v", b, err)
	}

	// Another engine's keys: the handshake fails, the probe says so within its timeout.
	wrong := mustKeys(t)
	start := time.Now()
	err = Probe(ep, wrong, 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "keys") {
		t.Fatalf("probe with other keys: err = %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("probe took %v", d)
	}
	bad, err := tr.Push(ep, false, WithCurve(wrong))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_ = bad.Send([]byte("intruder"))
	if b, err := pull.Recv(500 * time.Millisecond); err == nil {
		t.Fatalf("a peer with other keys delivered %q", b)
	}

	// Knowing the public key is not enough: a client with its own secret is refused by ZAP.
	sock, err := zmq.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	if err := sock.ClientAuthCurve(k.Public, wrong.Public, wrong.Secret); err != nil {
		t.Fatal(err)
	}
	m, err := startMonitor(sock, zmq.EVENT_HANDSHAKE_FAILED_AUTH|zmq.EVENT_HANDSHAKE_SUCCEEDED)
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop() // before sock.Close: the refused client goes on redialing
	mon := m.reader
	_ = mon.SetRcvtimeo(20 * time.Second)
	if err := sock.Connect(ep); err != nil {
		t.Fatal(err)
	}
	ev, _, val, err := mon.RecvEvent(0)
	if err != nil || ev != zmq.EVENT_HANDSHAKE_FAILED_AUTH || val != 400 {
		t.Fatalf("client with the public key but its own secret: event %v %d, err %v; want HANDSHAKE_FAILED_AUTH 400", ev, val, err)
	}
}

// TestPlainSocketsBesideCurve: once a CURVE server has started the process's ZAP handler,
// libzmq consults it about plain (NULL) sockets too; they must still connect (ipc:// sockets in
// the run directory, the KV-event publisher).
func TestPlainSocketsBesideCurve(t *testing.T) {
	srv, err := Default().Pull("tcp://127.0.0.1:0", true, WithCurve(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := plainDelivers(t, 20*time.Second); err != nil {
		t.Fatalf("plain socket beside a CURVE server: %v", err)
	}
}

// plainDelivers sends a frame over a fresh plain ipc:// pair of this process and waits up to
// timeout for it.
func plainDelivers(t *testing.T, timeout time.Duration) error {
	t.Helper()
	ep := Endpoint(t.TempDir(), "plain.sock")
	pull, err := Default().Pull(ep, true)
	if err != nil {
		return err
	}
	defer pull.Close()
	push, err := Default().Push(ep, false)
	if err != nil {
		return err
	}
	defer push.Close()
	if err := push.Send([]byte("plain")); err != nil {
		return err
	}
	if b, err := pull.Recv(timeout); err != nil || string(b) != "plain" {
		return fmt.Errorf("received %q, %v", b, err)
	}
	return nil
}

// TestMonitorStopKeepsIOAlive: libzmq's I/O thread writes monitor events with a blocking send,
// so an event after the reader closed used to stop every socket of the process. A client with
// other keys redials every ~100 ms; after its monitor stops, plain sockets must still deliver.
func TestMonitorStopKeepsIOAlive(t *testing.T) {
	srv, err := Default().Pull("tcp://127.0.0.1:0", true, WithCurve(mustKeys(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sock, err := zmq.NewSocket(zmq.PUSH)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	_ = sock.SetLinger(0)
	if err := setCurve(sock, mustKeys(t), false); err != nil {
		t.Fatal(err)
	}
	m, err := startMonitor(sock, zmq.EVENT_ALL)
	if err != nil {
		t.Fatal(err)
	}
	_ = m.reader.SetRcvtimeo(20 * time.Second)
	if err := sock.Connect(srv.Endpoint()); err != nil {
		t.Fatal(err)
	}
	for failed := false; !failed; {
		ev, _, _, err := m.reader.RecvEvent(0)
		if err != nil {
			t.Fatalf("no handshake failure from a client with other keys: %v", err)
		}
		failed = ev&(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL|zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL|zmq.EVENT_DISCONNECTED) != 0
	}
	m.stop()
	time.Sleep(500 * time.Millisecond) // several redials, each of which emitted events

	if err := plainDelivers(t, 10*time.Second); err != nil {
		t.Fatalf("after a monitor stopped, a plain socket: %v (libzmq's I/O thread is blocked)", err)
	}
}

func TestGozmqRefusesOtherHosts(t *testing.T) {
	tr := gozmqTransport{}
	for _, c := range []struct {
		ep   string
		bind bool
		opts []Option
	}{
		{"tcp://10.1.2.3:5000", false, nil},
		{"tcp://*:0", true, nil},
		{"tcp://127.0.0.1:0", true, []Option{WithCurve(mustKeys(t))}},
	} {
		s, err := tr.Push(c.ep, c.bind, c.opts...)
		if err == nil {
			s.Close()
			t.Fatalf("gozmq accepted %s", c.ep)
		}
		if !strings.Contains(err.Error(), "cgo build") {
			t.Fatalf("%s: error does not name the cgo build: %v", c.ep, err)
		}
	}
}
