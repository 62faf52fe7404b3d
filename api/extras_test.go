package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/sampling"
)

func TestLogitBiasAndTruncateReachTheRequest(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(1)}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/completions", `{"prompt":[5,6,7,8,9],"max_tokens":1,"truncate_prompt_tokens":3,
		"logit_bias":{"40":100,"7":-100,"12":0,"3":-2.5}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	req := e.lastRequest()
	want := []sampling.Bias{{ID: 3, Value: -2.5}, {ID: 7, Value: -100}, {ID: 40, Value: 100}}
	if !slices.Equal(req.Sampling.LogitBias, want) {
		t.Fatalf("logit bias %v, want %v (sorted, zeros dropped)", req.Sampling.LogitBias, want)
	}
	if !slices.Equal(req.InputIDs, []int32{7, 8, 9}) {
		t.Fatalf("truncated prompt %v, want the last 3 ids", req.InputIDs)
	}
	for _, c := range []struct{ body, param string }{
		{`"logit_bias":{"x":1}`, "logit_bias"},
		{`"logit_bias":{"-1":1}`, "logit_bias"},
		{`"logit_bias":{"+5":1}`, "logit_bias"},
		{`"logit_bias":{"05":1}`, "logit_bias"},
		{`"logit_bias":{" 5":1}`, "logit_bias"},
		{`"logit_bias":{"99999999":1}`, "logit_bias"},
		{`"logit_bias":{"5":100.5}`, "logit_bias"},
		{`"truncate_prompt_tokens":0`, "truncate_prompt_tokens"},
		{`"truncate_prompt_tokens":-2`, "truncate_prompt_tokens"},
	} {
		resp, body := post(t, ts, "/v1/completions", `{"prompt":[5,6],"max_tokens":1,`+c.body+`}`)
		var v struct {
			Error apiError `json:"error"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		if resp.StatusCode != 400 || v.Error.Param != c.param {
			t.Fatalf("%s: status %d %s, want a 400 naming %s", c.body, resp.StatusCode, body, c.param)
		}
	}
}

func TestIncludeStopStrInOutput(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{1, 2}, Text: "ab", PromptTokens: 1, CompletionTokens: 2})
		st.Push(&Delta{IDs: []int32{3}, Finished: true, FinishReason: FinishStop, MatchedStop: "##", PromptTokens: 1, CompletionTokens: 3})
	}}}
	ts := newTokServer(t, e, true)
	for _, include := range []bool{false, true} {
		want := "ab"
		if include {
			want = "ab##"
		}
		inc := "false"
		if include {
			inc = "true"
		}
		_, body := post(t, ts, "/v1/completions", `{"prompt":[5],"max_tokens":3,"include_stop_str_in_output":`+inc+`}`)
		var v struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Choices) != 1 || v.Choices[0].Text != want {
			t.Fatalf("include=%v: %s, want text %q", include, body, want)
		}
		_, body = post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"stream":true,"include_stop_str_in_output":`+inc+`}`)
		var text strings.Builder
		for data := range sseData(body) {
			var c struct {
				Choices []struct {
					Delta struct{ Content string } `json:"delta"`
				} `json:"choices"`
			}
			_ = json.Unmarshal([]byte(data), &c)
			for _, ch := range c.Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		if text.String() != want {
			t.Fatalf("include=%v streamed %q, want %q", include, text.String(), want)
		}
	}
}

// TestContentEncoding: a gzip-compressed body is decoded (and bounded once decompressed, so a
// small bomb is a 413), and a body in a coding the server does not decode is a 415 naming it,
// never read as if it were plain JSON.
func TestContentEncoding(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: finishAfter(2)}}
	ts := newTokServer(t, e, true)
	send := func(enc string, body []byte) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", enc)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return b.Bytes()
	}
	const body = `{"prompt":[5,6],"max_tokens":2}`
	if code, out := send("gzip", gz(body)); code != 200 || !strings.Contains(out, `"completion_tokens":2`) {
		t.Fatalf("gzip body: %d %s", code, out)
	}
	if code, out := send("br", []byte(body)); code != http.StatusUnsupportedMediaType || !strings.Contains(out, `\"br\"`) {
		t.Fatalf("br body: %d %s, want a 415 naming the coding", code, out)
	}
	if code, out := send("gzip", []byte(body)); code != 400 || !strings.Contains(out, "gzip") {
		t.Fatalf("plain body labelled gzip: %d %s, want a 400", code, out)
	}
	bomb := gz(`{"prompt":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"}`)
	if code, out := send("gzip", bomb); code != http.StatusRequestEntityTooLarge || !strings.Contains(out, "decompressed") {
		t.Fatalf("a %d-byte gzip bomb: %d %.200s, want a 413", len(bomb), code, out)
	}
}
