package api

import (
	"errors"
	"strings"
	"testing"
)

// TestRefusedOutputStatus: a request whose stream ends in the engine's refusal of it as the
// client's fault (a rank's, as the worker hands it on: a *BadRequestError) is a 400 with the
// reason on every endpoint, in its own error shape, and its stream's error event says 400; any
// other failure stays a 500, the engine's.
func TestRefusedOutputStatus(t *testing.T) {
	const reason = "prompt token 1 is 99999, outside the vocabulary [0, 8192)"
	failWith := func(err error) func(st *Stream, req *Request) {
		return func(st *Stream, req *Request) {
			st.Push(&Delta{Finished: true, FinishReason: FinishError, Err: err, PromptTokens: len(req.InputIDs)})
		}
	}
	for _, c := range []struct {
		err    error
		status int
		typ    string // the error type each body names
		event  string // what the stream's error event says
	}{
		{&BadRequestError{Msg: reason}, 400, "invalid_request_error", `"type":"invalid_request_error","code":400`},
		{errors.New("injected device fault"), 500, "", `"type":"server_error","code":500`},
	} {
		ts := newTokServer(t, &tokEngine{feedEngine: feedEngine{feed: failWith(c.err)}}, false)
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/v1/messages", "/generate"} {
			body := `{"model":"m","prompt":"hi","max_tokens":4}`
			switch path {
			case "/v1/chat/completions", "/v1/messages":
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
			case "/generate":
				body = `{"text":"hi","sampling_params":{"max_new_tokens":4}}`
			}
			resp, got := post(t, ts, path, body)
			if resp.StatusCode != c.status || !strings.Contains(got, c.err.Error()) || (c.typ != "" && !strings.Contains(got, c.typ)) {
				t.Errorf("%s with %v: %d %s, want %d naming the reason", path, c.err, resp.StatusCode, got, c.status)
			}
			if path == "/v1/messages" {
				continue // its stream's error event is Anthropic's: checked below
			}
			resp, got = post(t, ts, path, strings.Replace(body, `{`, `{"stream":true,`, 1))
			if resp.StatusCode != 200 || !strings.Contains(got, c.event) || !strings.Contains(got, c.err.Error()) {
				t.Errorf("%s stream with %v: %d %s, want an error event with %s", path, c.err, resp.StatusCode, got, c.event)
			}
		}
		resp, got := post(t, ts, "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":16}`)
		if resp.StatusCode != c.status || !strings.Contains(got, c.err.Error()) {
			t.Errorf("/v1/responses with %v: %d %s, want %d naming the reason", c.err, resp.StatusCode, got, c.status)
		}
		resp, got = post(t, ts, "/v1/messages", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`)
		want := `"type":"api_error"`
		if c.status == 400 {
			want = `"type":"invalid_request_error"`
		}
		if resp.StatusCode != 200 || !strings.Contains(got, "event: error") || !strings.Contains(got, want) {
			t.Errorf("/v1/messages stream with %v: %d %s, want an error event of %s", c.err, resp.StatusCode, got, want)
		}
	}
}
