package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestStalledReaderIsCut: a client that sends a long streamed request and then stops reading
// is cut at the write timeout and its request aborted at the rank (its KV freed), instead of
// the kernel's send buffer (autotuned to megabytes) taking the whole stream while the request
// holds its KV to the end (issue 29, item 7). The client is a real TCP client that simply does
// not read; when it finally reads, the stream it gets ends without a finish or [DONE].
func TestStalledReaderIsCut(t *testing.T) {
	e := startEngine(t, engineOpts{tokArgs: []string{"--write-timeout", "1s"}})
	const maxTokens = 4000
	body, _ := json.Marshal(map[string]any{"model": "pico", "prompt": []int32{5, 6, 7}, "max_tokens": maxTokens, "ignore_eos": true,
		"stream": true, "return_token_ids": true, "logprobs": 5, "temperature": 1, "seed": 1})
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", e.port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(64 << 10) // a modest client: the server's buffer is what is tested
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The rank runs the request, then stops it when the server gives up on the silent reader.
	start := time.Now()
	seen := false
	for time.Since(start) < 120*time.Second {
		var l loadReport
		e.getJSON("/get_load", &l)
		if l.Totals.Running > 0 {
			seen = true
		} else if seen {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !seen {
		t.Fatal("the request never ran")
	}
	cutAfter := time.Since(start)
	// Now read what the server wrote: a stream cut short, not a complete one.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	data, err := io.ReadAll(conn)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) { // a kept-alive connection: no EOF
		t.Fatalf("reading after the stall: %v (%d bytes)", err, len(data))
	}
	ids := 0
	for _, line := range bytes.Split(data, []byte("\n")) {
		payload, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: "))
		if !ok || string(payload) == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if json.Unmarshal(payload, &c) == nil {
			for _, ch := range c.Choices {
				ids += len(ch.TokenIDs)
			}
		}
	}
	t.Logf("request stopped at the rank %v after it started; the client then read %d bytes, %d ids", cutAfter.Round(time.Millisecond), len(data), ids)
	if strings.Contains(string(data), "[DONE]") || ids >= maxTokens {
		t.Fatalf("the stalled reader was never cut: it got the whole stream (%d ids) once it read again", ids)
	}
}
