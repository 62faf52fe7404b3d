package ipc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The conformance suite: the same tests run against every transport compiled into the test
// binary (libzmq and gozmq under cgo, gozmq alone with CGO_ENABLED=0).

var schemes = []string{"ipc", "tcp"}

func forEachTransport(t *testing.T, fn func(t *testing.T, tr Transport)) {
	for _, name := range Names() {
		tr, err := ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { fn(t, tr) })
	}
}

func forEachScheme(t *testing.T, fn func(t *testing.T, tr Transport, scheme string)) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		for _, sc := range schemes {
			t.Run(sc, func(t *testing.T) { fn(t, tr, sc) })
		}
	})
}

// bindAddr returns an endpoint to bind: a fresh socket path in a private run directory, or
// an ephemeral port on 127.0.0.1 (peers then connect to the socket's Endpoint()).
func bindAddr(t *testing.T, scheme string) string {
	t.Helper()
	if scheme == "tcp" {
		return "tcp://127.0.0.1:0"
	}
	dir, err := TempRunDir("") // t.TempDir paths can exceed the 107-byte unix socket limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Endpoint(dir, "s")
}

func pull(t *testing.T, tr Transport, ep string, bind bool, opts ...Option) Receiver {
	t.Helper()
	r, err := tr.Pull(ep, bind, opts...)
	if err != nil {
		t.Fatalf("pull %s: %v", ep, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func push(t *testing.T, tr Transport, ep string, bind bool, opts ...Option) Sender {
	t.Helper()
	s, err := tr.Push(ep, bind, opts...)
	if err != nil {
		t.Fatalf("push %s: %v", ep, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// msg encodes (peer, seq) followed by pad filler bytes derived from seq.
func msg(peer uint32, seq uint64, pad int) []byte {
	b := make([]byte, 12+pad)
	binary.LittleEndian.PutUint32(b, peer)
	binary.LittleEndian.PutUint64(b[4:], seq)
	for i := range pad {
		b[12+i] = byte(seq) + byte(i)
	}
	return b
}

func parseMsg(t *testing.T, b []byte) (peer uint32, seq uint64) {
	t.Helper()
	if len(b) < 12 {
		t.Fatalf("short message: %d bytes", len(b))
	}
	peer, seq = binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint64(b[4:])
	if !bytes.Equal(b, msg(peer, seq, len(b)-12)) {
		t.Fatalf("message (%d,%d) of %d bytes is corrupted", peer, seq, len(b))
	}
	return peer, seq
}

func mustSend(t *testing.T, s Sender, b []byte) {
	t.Helper()
	if err := s.Send(b); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func mustRecv(t *testing.T, r Receiver) []byte {
	t.Helper()
	b, err := r.Recv(20 * time.Second)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return b
}

func TestOrderingOnePeer(t *testing.T) {
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		r := pull(t, tr, bindAddr(t, scheme), true)
		s := push(t, tr, r.Endpoint(), false)
		const n = 2000
		go func() {
			for i := range n {
				if err := s.Send(msg(0, uint64(i), i%200)); err != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
			}
		}()
		for i := range n {
			if _, seq := parseMsg(t, mustRecv(t, r)); seq != uint64(i) {
				t.Fatalf("message %d arrived as number %d", seq, i)
			}
		}
		if b, err := r.Recv(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("extra message after the last one: %d bytes, err %v", len(b), err)
		}
	})
}

// TestManyPushersOnePull is N schedulers -> detokd: every message arrives once, in order per peer.
func TestManyPushersOnePull(t *testing.T) {
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		r := pull(t, tr, bindAddr(t, scheme), true)
		const peers, per = 4, 500
		var wg sync.WaitGroup
		for p := range peers {
			s := push(t, tr, r.Endpoint(), false)
			wg.Go(func() {
				for i := range per {
					if err := s.Send(msg(uint32(p), uint64(i), 32)); err != nil {
						t.Errorf("peer %d send %d: %v", p, i, err)
						return
					}
				}
			})
		}
		next := make([]uint64, peers)
		for range peers * per {
			p, seq := parseMsg(t, mustRecv(t, r))
			if int(p) >= peers || seq != next[p] {
				t.Fatalf("peer %d: got seq %d, want %d (lost, duplicated or reordered)", p, seq, next[p])
			}
			next[p]++
		}
		wg.Wait()
		if b, err := r.Recv(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("duplicate delivery: %d extra bytes, err %v", len(b), err)
		}
	})
}

// TestOnePushManyPulls is one PUSH connected to several PULLs: each message reaches exactly
// one of them, and every peer takes part.
func TestOnePushManyPulls(t *testing.T) {
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		const pulls = 3
		var rs []Receiver
		for range pulls {
			rs = append(rs, pull(t, tr, bindAddr(t, scheme), true))
		}
		s := push(t, tr, rs[0].Endpoint(), false)
		for _, r := range rs[1:] {
			if err := s.Connect(r.Endpoint()); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[uint64]int{}
		perPeer := make([]int, pulls)
		var wg sync.WaitGroup
		done := make(chan struct{})
		for i, r := range rs {
			wg.Go(func() {
				for {
					b, err := r.Recv(10 * time.Millisecond)
					if errors.Is(err, ErrTimeout) {
						select {
						case <-done:
							return
						default:
							continue
						}
					}
					if err != nil {
						t.Errorf("recv: %v", err)
						return
					}
					_, seq := parseMsg(t, b)
					mu.Lock()
					seen[seq]++
					perPeer[i]++
					mu.Unlock()
				}
			})
		}
		allServed := func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range perPeer {
				if c == 0 {
					return false
				}
			}
			return true
		}
		// Send until every peer has been served (connections come up asynchronously), then
		// a further fixed burst.
		var sent uint64
		deadline := time.Now().Add(5 * time.Second)
		for !allServed() {
			if time.Now().After(deadline) {
				t.Fatalf("not every PULL received a message: %v", perPeer)
			}
			mustSend(t, s, msg(0, sent, 8))
			sent++
			time.Sleep(time.Millisecond)
		}
		for range 600 {
			mustSend(t, s, msg(0, sent, 8))
			sent++
		}
		for {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			if n == int(sent) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("received %d distinct of %d messages", n, sent)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // let any duplicate arrive
		close(done)
		wg.Wait()
		for seq, c := range seen {
			if c != 1 || seq >= sent {
				t.Fatalf("message %d delivered %d times", seq, c)
			}
		}
		t.Logf("%d messages over %d peers: %v", sent, pulls, perPeer)
	})
}

// TestRoundRobin: with every peer connected, a PUSH deals messages out in strict rotation.
func TestRoundRobin(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		if tr.Name() == "gozmq" {
			t.Skip("gozmq balances by work-sharing (an idle peer's writer takes the next message), " +
				"not strict rotation; exactly-once delivery is checked by TestOnePushManyPulls")
		}
		const pulls, rounds = 3, 50
		var rs []Receiver
		for range pulls {
			rs = append(rs, pull(t, tr, bindAddr(t, "ipc"), true))
		}
		s := push(t, tr, rs[0].Endpoint(), false)
		for _, r := range rs[1:] {
			if err := s.Connect(r.Endpoint()); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until all connections are up: one probe per peer, drained from each.
		for _, r := range rs {
			mustSend(t, s, msg(9, 0, 0))
			parseMsg(t, mustRecv(t, r))
		}
		for i := range pulls * rounds {
			mustSend(t, s, msg(0, uint64(i), 0))
		}
		for i, r := range rs {
			for range rounds {
				parseMsg(t, mustRecv(t, r))
			}
			if b, err := r.Recv(20 * time.Millisecond); err == nil {
				t.Fatalf("peer %d got more than its %d turns (extra %d bytes)", i, rounds, len(b))
			}
		}
	})
}

// TestReconnectAfterBinderRestart: the bound PULL goes away and a new one binds the same
// endpoint; the connected PUSH reconnects and what it sends from then on arrives, in order.
func TestReconnectAfterBinderRestart(t *testing.T) {
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		r1, err := tr.Pull(bindAddr(t, scheme), true)
		if err != nil {
			t.Fatal(err)
		}
		ep := r1.Endpoint()
		s := push(t, tr, ep, false, WithSendTimeout(time.Second))
		mustSend(t, s, msg(0, 0, 0))
		parseMsg(t, mustRecv(t, r1))
		if err := r1.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := r1.Recv(0); !errors.Is(err, ErrClosed) {
			t.Fatalf("Recv after Close: %v, want ErrClosed", err)
		}

		// libzmq closes its listener in a background I/O thread, so the port can stay taken for
		// a moment after Close returns; a restarted process would simply retry its bind.
		var r2 Receiver
		for start := time.Now(); ; {
			if r2, err = tr.Pull(ep, true); err == nil {
				break
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("rebind %s: %v", ep, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Cleanup(func() { r2.Close() })
		// Probe until the new peer hears from us; probes sent during the outage may arrive
		// late, which is fine (at most once, not at least once).
		const probe, data = 1, 2
		deadline := time.Now().Add(5 * time.Second)
		for reconnected := false; !reconnected; {
			if time.Now().After(deadline) {
				t.Fatal("no message arrived after the peer restarted")
			}
			mustSend(t, s, msg(probe, 0, 0))
			if b, err := r2.Recv(10 * time.Millisecond); err == nil {
				parseMsg(t, b)
				reconnected = true
			}
		}
		const n = 200
		for i := range n {
			mustSend(t, s, msg(data, uint64(i), 64))
		}
		for want := uint64(0); want < n; {
			p, seq := parseMsg(t, mustRecv(t, r2))
			if p == probe {
				continue
			}
			if seq != want {
				t.Fatalf("after reconnect got %d, want %d", seq, want)
			}
			want++
		}
	})
}

// TestConnectBeforeBind: a PUSH may start before its peer binds.
func TestConnectBeforeBind(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		ep := bindAddr(t, "ipc")
		s := push(t, tr, ep, false)
		mustSend(t, s, msg(0, 7, 3))
		time.Sleep(30 * time.Millisecond)
		r := pull(t, tr, ep, true)
		if _, seq := parseMsg(t, mustRecv(t, r)); seq != 7 {
			t.Fatalf("got %d", seq)
		}
	})
}

// TestBoundedQueues: a peer that never reads, or is not there at all, makes Send time out
// after a bounded number of messages instead of blocking or buffering without limit.
func TestBoundedQueues(t *testing.T) {
	const hwm, timeout = 8, 50 * time.Millisecond
	sendUntilTimeout := func(t *testing.T, s Sender, frame []byte, limit int) int {
		t.Helper()
		for i := range limit {
			start := time.Now()
			err := s.Send(frame)
			if took := time.Since(start); took > timeout+2*time.Second {
				t.Fatalf("send %d blocked for %v with a %v timeout", i, took, timeout)
			}
			if errors.Is(err, ErrTimeout) {
				return i
			}
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
		t.Fatalf("%d sends to a peer that never reads all succeeded: the queue is not bounded", limit)
		return 0
	}
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		t.Run("slow peer", func(t *testing.T) {
			r := pull(t, tr, bindAddr(t, scheme), true, WithRecvHWM(hwm))
			s := push(t, tr, r.Endpoint(), false, WithSendHWM(hwm), WithSendTimeout(timeout))
			// Kernel socket buffers absorb a few MiB on top of both high-water marks.
			frame := make([]byte, 64<<10)
			n := sendUntilTimeout(t, s, frame, 1000)
			t.Logf("%d x 64 KiB queued before the send timed out", n)
			// Once the reader drains, sending works again.
			for range n {
				if _, err := r.Recv(5 * time.Second); err != nil {
					t.Fatalf("draining: %v", err)
				}
			}
			mustSend(t, s, frame)
		})
		t.Run("absent peer", func(t *testing.T) {
			ep := bindAddr(t, scheme)
			if scheme == "tcp" {
				ep = "tcp://127.0.0.1:1" // nothing listens on a privileged port
			}
			s := push(t, tr, ep, false, WithSendHWM(hwm), WithSendTimeout(timeout))
			if n := sendUntilTimeout(t, s, []byte("x"), 10*hwm); n > hwm {
				t.Fatalf("%d messages queued for an absent peer with a high-water mark of %d", n, hwm)
			}
		})
	})
}

func TestRecvTimeoutAndClose(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		r := pull(t, tr, bindAddr(t, "ipc"), true)
		start := time.Now()
		if _, err := r.Recv(0); !errors.Is(err, ErrTimeout) {
			t.Fatalf("Recv(0) = %v, want ErrTimeout", err)
		}
		if _, err := r.Recv(30 * time.Millisecond); !errors.Is(err, ErrTimeout) {
			t.Fatalf("Recv(30ms) = %v, want ErrTimeout", err)
		}
		if took := time.Since(start); took < 30*time.Millisecond || took > 2*time.Second {
			t.Fatalf("Recv(30ms) took %v", took)
		}
		// Close wakes a Recv that would otherwise wait forever.
		errc := make(chan error, 1)
		go func() {
			_, err := r.Recv(-1)
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("blocked Recv returned %v, want ErrClosed", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Close did not wake a blocked Recv")
		}
		s := push(t, tr, bindAddr(t, "ipc"), true)
		s.Close()
		if err := s.Send([]byte("x")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Send after Close = %v, want ErrClosed", err)
		}
	})
}

func TestLargeAndEmptyFrames(t *testing.T) {
	forEachScheme(t, func(t *testing.T, tr Transport, scheme string) {
		r := pull(t, tr, bindAddr(t, scheme), true)
		s := push(t, tr, r.Endpoint(), false)
		const n = 6
		go func() {
			for i := range n {
				if err := s.Send(msg(0, uint64(i), 1<<20)); err != nil {
					t.Errorf("send: %v", err)
				}
			}
			if err := s.Send(nil); err != nil {
				t.Errorf("send empty: %v", err)
			}
		}()
		for i := range n {
			b := mustRecv(t, r)
			if _, seq := parseMsg(t, b); seq != uint64(i) || len(b) != 12+1<<20 {
				t.Fatalf("frame %d: seq %d, %d bytes", i, seq, len(b))
			}
		}
		if b := mustRecv(t, r); len(b) != 0 {
			t.Fatalf("empty frame arrived as %d bytes", len(b))
		}
	})
}

// TestSendCopiesFrame: the caller may reuse its buffer as soon as Send returns.
func TestSendCopiesFrame(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		r := pull(t, tr, bindAddr(t, "ipc"), true)
		s := push(t, tr, r.Endpoint(), false)
		buf := []byte("first")
		mustSend(t, s, buf)
		copy(buf, "XXXXX")
		if b := mustRecv(t, r); string(b) != "first" {
			t.Fatalf("got %q: Send kept a reference to the caller's buffer", b)
		}
	})
}

// TestPushBindsPullConnects: the other direction of binding, with two connecting PULLs.
func TestPushBindsPullConnects(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr Transport) {
		s := push(t, tr, bindAddr(t, "tcp"), true)
		r := pull(t, tr, s.Endpoint(), false)
		for i := range 50 {
			mustSend(t, s, msg(0, uint64(i), 1))
		}
		for i := range 50 {
			if _, seq := parseMsg(t, mustRecv(t, r)); seq != uint64(i) {
				t.Fatalf("got %d want %d", seq, i)
			}
		}
	})
}

func TestBadEndpoints(t *testing.T) {
	long := "ipc:///" + string(bytes.Repeat([]byte("x"), maxIPCPath+1))
	forEachTransport(t, func(t *testing.T, tr Transport) {
		for _, ep := range []string{"", "inproc://x", "/tmp/x", "ipc://", long, "tcp://127.0.0.1", "udp://1.2.3.4:5"} {
			if s, err := tr.Push(ep, false); err == nil {
				s.Close()
				t.Errorf("Push(%q) succeeded", ep)
			}
			if r, err := tr.Pull(ep, true); err == nil {
				r.Close()
				t.Errorf("Pull(%q) succeeded", ep)
			}
		}
		// Binding an endpoint that is in use fails.
		for _, sc := range schemes {
			r := pull(t, tr, bindAddr(t, sc), true)
			if r2, err := tr.Pull(r.Endpoint(), true); err == nil {
				r2.Close()
				t.Errorf("second bind of %s succeeded", r.Endpoint())
			}
		}
		// A socket file nobody listens on (its process died) is taken over.
		ep := bindAddr(t, "ipc")
		ln, err := net.Listen("unix", strings.TrimPrefix(ep, "ipc://"))
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		r := pull(t, tr, ep, true)
		s := push(t, tr, ep, false)
		mustSend(t, s, []byte("after stale"))
		if b := mustRecv(t, r); string(b) != "after stale" {
			t.Fatalf("got %q", b)
		}
	})
}

func TestRunDir(t *testing.T) {
	base := t.TempDir()
	dir, err := RunDir(filepath.Join(base, "a", "run"))
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("run dir %s: %v %v", dir, fi.Mode(), err)
	}
	if again, err := RunDir(dir); err != nil || again != dir {
		t.Fatalf("reopening run dir: %q %v", again, err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RunDir(open); err == nil {
		t.Fatal("RunDir accepted a directory others can read")
	}
	if got, want := Endpoint(dir, "detokd.in"), "ipc://"+dir+"/detokd.in"; got != want {
		t.Fatalf("Endpoint = %q, want %q", got, want)
	}
	names := map[string]bool{DetokEndpoint(dir): true}
	for i := range 3 {
		names[SchedulerEndpoint(dir, i)] = true
		names[WorkerEndpoint(dir, i)] = true
	}
	if len(names) != 7 {
		t.Fatalf("engine endpoints collide: %v", names)
	}
	tmp, err := TempRunDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(tmp); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("temp run dir: %v %v", fi, err)
	}
}

func TestTransportSelection(t *testing.T) {
	if _, err := ByName("gozmq"); err != nil {
		t.Fatal(err)
	}
	if _, err := ByName("nanomsg"); err == nil {
		t.Fatal("ByName accepted an unknown transport")
	}
	want := "gozmq"
	if cgoEnabled {
		want = "libzmq"
	}
	if got := Default().Name(); got != want {
		t.Fatalf("Default() = %s, want %s", got, want)
	}
}
