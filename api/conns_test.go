package api

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// At the bound, the connection idle the longest is closed for a new one, and a connection that
// is serving a request is never the one closed.
func TestConnLimiterShedsLongestIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewConnLimiter(ln, 3)
	release := make(chan struct{})
	hs := &http.Server{ConnState: lim.Track, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		w.Write([]byte("ok"))
	})}
	go hs.Serve(lim)
	defer hs.Close()
	addr := ln.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	busy := dial() // serving /slow for the whole test
	busy.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"))
	time.Sleep(50 * time.Millisecond)
	idle1 := dial()
	time.Sleep(20 * time.Millisecond)
	idle2 := dial()
	time.Sleep(50 * time.Millisecond)
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	fresh := dial() // the fourth: idle1 goes
	fresh.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if !closed(idle1) || closed(idle2) {
		t.Fatal("the longest-idle connection was not the one shed")
	}
	buf := make([]byte, 64)
	fresh.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := fresh.Read(buf); err != nil || n == 0 {
		t.Fatalf("the new connection was not served: %v", err)
	}
	close(release)
	busy.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := busy.Read(buf); err != nil || n == 0 {
		t.Fatalf("the busy connection was cut: %v", err)
	}
	if lim.Shed() != 1 || lim.Open() > 3 {
		t.Fatalf("shed %d, open %d", lim.Shed(), lim.Open())
	}
}
