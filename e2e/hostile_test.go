package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Numeric fields the engine cannot honour exactly, inexact JSON keys and template variables that
// would override the validated request are 400s naming the field, on the real engine.
func TestStrictFields(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	for _, c := range []struct{ path, body, param string }{
		{"/v1/completions", `{"prompt":"x","max_tokens":9223372036854775807}`, "max_tokens"},
		{"/v1/completions", `{"prompt":"x","top_k":2147483648}`, "top_k"},
		{"/v1/completions", `{"prompt":"x","top_k":4294967297}`, "top_k"},
		{"/v1/completions", `{"prompt":"x","min_tokens":4294967296}`, "min_tokens"},
		{"/v1/completions", `{"prompt":"x","min_tokens":100000}`, "min_tokens"},
		{"/v1/completions", `{"prompt":"x","stream":true,"stream_interval":4294967297}`, "stream_interval"},
		{"/v1/completions", `{"prompt":"x","temperature":3.4e38}`, "temperature"},
		{"/v1/completions", `{"prompt":"x","temperature":1e300}`, "temperature"},
		{"/generate", `{"text":"x","sampling_params":{"max_new_tokens":9223372036854775807}}`, "max_new_tokens"},
		{"/generate", `{"text":"x","sampling_params":{"min_new_tokens":4294967296}}`, "min_tokens"},
		{"/generate", `{"text":"x","sampling_params":{"top_k":2147483648}}`, "top_k"},
		{"/generate", `{"text":"x","sampling_params":{"stream_interval":4294967297}}`, "stream_interval"},
		{"/generate", `{"text":"x","sampling_params":{"Max_New_Tokens":3}}`, "sampling_params.Max_New_Tokens"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"MAX_TOKENS":3}`, "MAX_TOKENS"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"messages":[{"role":"user","content":"other"}]}}`, "chat_template_kwargs.messages"},
	} {
		code, b := e.postRaw(c.path, c.body)
		var out struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &out)
		if code != 400 || out.Error.Param != c.param {
			t.Errorf("%s %s: %d %.300s, want 400 naming %s", c.path, c.body, code, b, c.param)
		}
	}
}

// Inputs are bounded before the expensive work: a 50 MB body is refused from its header before
// it is sent, a long rid is refused, ids beyond the context are refused as they are counted, and
// no error body echoes a huge input.
func TestBoundedInputs(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})

	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 50<<20)
	fmt.Fprintf(conn, `{"input_ids":[%s1`, strings.Repeat("1,", 1<<16))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("50 MB body, 128 KiB of it sent: no response (%v): the server is reading it", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("50 MB body: status %d, want 413", resp.StatusCode)
	}
	t.Logf("50 MB body refused in %v, 128 KiB of it sent", time.Since(start))

	code, b := e.postRaw("/generate", `{"text":"x","rid":"`+strings.Repeat("r", 1<<20)+`","sampling_params":{"max_new_tokens":2}}`)
	if code != 400 || !strings.Contains(string(b), "rid") || len(b) > 4096 {
		t.Errorf("1 MiB rid: %d, %d bytes: %.300s", code, len(b), b)
	}

	start = time.Now()
	code, b = e.postRaw("/generate", `{"input_ids":[`+strings.Repeat("1,", 4<<20)+`1]}`)
	if code != 400 || !strings.Contains(string(b), "context length") {
		t.Errorf("4M ids: %d %.300s", code, b)
	}
	t.Logf("8 MiB of ids refused in %v", time.Since(start))

	code, b = e.postRaw("/generate", `{"text":"x","sampling_params":{"regex":"(`+strings.Repeat("a", 1<<20)+`"}}`)
	if code != 400 || len(b) > 4096 {
		t.Errorf("1 MiB bad regex: %d, error body of %d bytes", code, len(b))
	}
	code, b = e.postRaw("/generate", `{"text":"x","`+strings.Repeat("k", 1<<20)+`":1}`)
	if code != 400 || len(b) > 4096 {
		t.Errorf("1 MiB unknown key: %d, error body of %d bytes", code, len(b))
	}
	// The engine still serves.
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0}})
	if len(r.OutputIDs) == 0 {
		t.Fatal("engine stopped serving")
	}
}
