package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Connection timeouts as production servers set them (issue 15, item 4): a kept-alive connection
// idle too long, a body that never finishes and a stream reader that stops reading are all cut,
// and the stalled stream's request is aborted.
func TestConnectionTimeouts(t *testing.T) {
	long := []string{"--context-length", "65536"}
	e := startEngine(t, engineOpts{schedArgs: append(streamReplayArgs(0), long...),
		tokArgs: append(long, "--idle-timeout", "1s", "--read-body-timeout", "1s", "--write-timeout", "1s", "--read-header-timeout", "1s")})
	addr := strings.TrimPrefix(e.base, "http://")
	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		return err == nil // EOF: the server closed it; a timeout error: still open
	}

	// Idle keep-alive.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	if !closedWithin(c, 5*time.Second) {
		t.Error("an idle kept-alive connection was still open after 5 s (--idle-timeout 1s)")
	}

	// A body that never finishes.
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"input_ids\":[1,")
	if !closedWithin(c2, 5*time.Second) {
		t.Error("a connection whose body never finished was still open after 5 s (--read-body-timeout 1s)")
	}

	// A stream reader that stops reading: small receive buffer, never read. Logprobs make the
	// chunks big enough to fill the kernel's send buffer (autotuned up to 4 MiB) in seconds.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c3, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	body := fmt.Sprintf(`{"prompt":%s,"stream":true,"max_tokens":60000,"ignore_eos":true,"logprobs":1}`, idsJSON(streamPrompt))
	fmt.Fprintf(c3, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	deadline := time.Now().Add(15 * time.Second)
	sawRunning := false
	for {
		var l struct {
			InFlight int `json:"in_flight"`
		}
		e.getJSON("/get_load", &l)
		sawRunning = sawRunning || l.InFlight > 0
		if sawRunning && l.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled stream reader: in flight %d after 15 s (--write-timeout 1s)", l.InFlight)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func idsJSON(ids []int32) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// A flood of idle connections cannot take the worker's descriptors (issue 15, item 4): at
// --max-connections the longest-idle ones are closed and new clients are served. The 20,000
// figure is bench/idleconns; this is the same mechanism at a small bound.
func TestIdleConnectionsShed(t *testing.T) {
	const bound, flood = 200, 600
	e := startEngine(t, engineOpts{tokArgs: []string{"--max-connections", fmt.Sprint(bound)}})
	addr := strings.TrimPrefix(e.base, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < flood; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	start := time.Now()
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 2, "temperature": 0}})
	if len(r.OutputIDs) == 0 {
		t.Fatal("no output for a new client during the flood")
	}
	t.Logf("new client served %v after %d idle connections", time.Since(start), flood)
	m, err := httpGet(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var open, shed float64
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "llm_http_connections_open{") {
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &open)
		}
		if strings.HasPrefix(line, "llm_http_connections_shed_total{") {
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &shed)
		}
	}
	if open > bound || shed < flood-bound {
		t.Fatalf("open %v (bound %d), shed %v (want >= %d)", open, bound, shed, flood-bound)
	}
}

// signal sends sig to one of the engine's processes (its process group), as an operator or an
// init system does.
func (e *engine) signal(name string, sig syscall.Signal) {
	e.mu.Lock()
	p := e.procs[name]
	e.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// SIGTERM drains (issue 15, item 6): the worker stops accepting, requests that finish within
// --shutdown-timeout finish, and the rest end cleanly: every stream with its tokens, an error
// event and [DONE], every whole request with a response.
func TestGracefulShutdown(t *testing.T) {
	long := []string{"--context-length", "262144"}
	e := startEngine(t, engineOpts{schedArgs: append(streamReplayArgs(5*time.Millisecond), long...), tokArgs: append(long, "--shutdown-timeout", "2s")})
	type result struct {
		tokens int
		errEv  bool
		done   bool
		finish string
		usage  int // meta_info.completion_tokens of the finishing chunk
		err    error
	}
	const streams, whole, short = 40, 20, 5
	results := make([]result, streams+short)
	statuses := make([]int, whole)
	bodies := make([]string, whole)
	var started, wg sync.WaitGroup
	started.Add(streams + short)
	for i := 0; i < streams+short; i++ {
		n := 100000 // far longer than the drain
		if i >= streams {
			n = 100 // finishes within it
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := sync.OnceFunc(started.Done)
			defer first() // also when the stream fails before its first token
			r := &results[i]
			r.err = e.streamEvents(context.Background(), "/generate", map[string]any{"input_ids": streamPrompt, "stream": true,
				"sampling_params": map[string]any{"max_new_tokens": n, "ignore_eos": true}}, func(data []byte) error {
				if string(data) == "[DONE]" {
					r.done = true
					return nil
				}
				var c nativeChunk
				if err := json.Unmarshal(data, &c); err != nil {
					return err
				}
				if c.Error != nil {
					r.errEv = true
					return nil
				}
				r.tokens += len(c.OutputIDs)
				if len(c.MetaInfo.FinishReason) > 0 && string(c.MetaInfo.FinishReason) != "null" {
					r.finish = string(c.MetaInfo.FinishReason)
					r.usage = c.MetaInfo.CompletionTokens
				}
				first()
				return nil
			})
		}()
	}
	for i := 0; i < whole; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"input_ids": streamPrompt, "sampling_params": map[string]any{"max_new_tokens": 100000, "ignore_eos": true}})
			resp, err := http.Post(e.base+"/generate", "application/json", strings.NewReader(string(b)))
			if err != nil {
				bodies[i] = err.Error()
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			statuses[i], bodies[i] = resp.StatusCode, string(out)
		}()
	}
	// n > 1: several candidates per request, ended together.
	const multi = 3
	multiDone := make([]bool, multi)
	multiCodes := make([]int, multi)
	multiErrs := make([]string, multi)
	for i := 0; i < multi; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = e.streamEvents(context.Background(), "/v1/completions", map[string]any{"prompt": streamPrompt, "n": 2, "stream": true,
				"max_tokens": 100000, "ignore_eos": true}, func(data []byte) error {
				multiDone[i] = multiDone[i] || string(data) == "[DONE]"
				return nil
			})
		}()
		go func() {
			defer wg.Done()
			b, _ := json.Marshal(map[string]any{"prompt": streamPrompt, "n": 2, "max_tokens": 100000, "ignore_eos": true})
			resp, err := http.Post(e.base+"/v1/completions", "application/json", strings.NewReader(string(b)))
			if err != nil {
				multiErrs[i] = err.Error()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			multiCodes[i] = resp.StatusCode
		}()
	}
	started.Wait()
	time.Sleep(200 * time.Millisecond)
	e.signal("tokenizerd", syscall.SIGTERM)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(15 * time.Second):
		t.Fatal("requests still open 15 s after SIGTERM (--shutdown-timeout 2s)")
	}
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("stream %d: %v", i, r.err)
		case !r.done || r.tokens == 0:
			t.Errorf("stream %d: %d tokens, [DONE] %v: not ended cleanly", i, r.tokens, r.done)
		case i < streams && !r.errEv:
			t.Errorf("stream %d: cut by the drain without an error event (%d tokens)", i, r.tokens)
		case r.usage != r.tokens:
			t.Errorf("stream %d: %d tokens delivered, but its usage says %d", i, r.tokens, r.usage)
		case i >= streams && (r.errEv || r.tokens != 100 || !strings.Contains(r.finish, "length")):
			t.Errorf("short stream %d: %d tokens, finish %s, error event %v: want all 100 and length", i, r.tokens, r.finish, r.errEv)
		}
	}
	for i, code := range statuses {
		if code != http.StatusServiceUnavailable || !strings.Contains(bodies[i], "shutting down") {
			t.Errorf("whole request %d: %d %.200s, want a 503 saying the server is shutting down", i, code, bodies[i])
		}
		// It says how far the request got: the replay decodes a token every 5 ms, so well over
		// 0 by the end of the 2 s drain.
		var n int
		if _, err := fmt.Sscanf(bodies[i][strings.Index(bodies[i], "after ")+len("after "):], "%d tokens", &n); err != nil || n == 0 {
			t.Errorf("whole request %d: %.200s, want the tokens generated before the drain ended it", i, bodies[i])
		}
	}
	for i := 0; i < multi; i++ {
		if !multiDone[i] || (multiCodes[i] != http.StatusOK && multiCodes[i] != http.StatusServiceUnavailable) {
			t.Errorf("n=2 request %d: stream ended with [DONE] %v; whole request status %d %s", i, multiDone[i], multiCodes[i], multiErrs[i])
		}
	}
	// Nothing listens any more.
	if _, err := http.Get(e.base + "/health"); err == nil {
		t.Error("the port still accepts after the drain")
	}
}
