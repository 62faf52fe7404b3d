package api

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/sampling"
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

// Stop ends requests in flight cleanly: a stream with its pending tokens, an error event and
// [DONE]; a whole request with a 503; later requests with a 503 before they reach the engine.
func TestStopEndsRequestsCleanly(t *testing.T) {
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{7, 8}}) // then nothing: the request runs on
	}}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 1 << 10, StreamInterval: 1, SkipTokenizerInit: true, DefaultSampling: sampling.DefaultParams()},
		e, testRegistry(), discardLog())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	streamed := make(chan string, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/generate", "application/json", strings.NewReader(`{"input_ids":[1],"stream":true}`))
		if err != nil {
			streamed <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		streamed <- string(b)
	}()
	whole := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/generate", "application/json", strings.NewReader(`{"input_ids":[1]}`))
		if err != nil {
			whole <- 0
			return
		}
		resp.Body.Close()
		whole <- resp.StatusCode
	}()
	time.Sleep(200 * time.Millisecond)
	srv.Stop()
	select {
	case out := <-streamed:
		if !strings.Contains(out, `"output_ids":[7,8]`) || !strings.Contains(out, "shutting down") || !strings.HasSuffix(out, "data: [DONE]\n\n") {
			t.Errorf("stream after Stop: %q", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream not ended by Stop")
	}
	if code := <-whole; code != http.StatusServiceUnavailable {
		t.Errorf("whole request after Stop: %d", code)
	}
	resp, err := http.Post(ts.URL+"/generate", "application/json", strings.NewReader(`{"input_ids":[1]}`))
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("request after Stop: %v %v", resp, err)
	}
	resp.Body.Close()
}
