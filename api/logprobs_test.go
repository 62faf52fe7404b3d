package api

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// logprobFeed sends tokens 10, 11, 12 with logprobs -1, -2, -3 and top-2 entries per position
// (the sampled token is second at position 0 and absent at position 2).
func logprobFeed(st *Stream, req *Request) {
	ids := []int32{10, 11, 12}
	top := [][]int32{{50, 10}, {11, 51}, {52, 53}}
	for i, id := range ids {
		d := Delta{IDs: []int32{id}, Logprobs: []float32{float32(-1 - i)}, PromptTokens: 2, CompletionTokens: i + 1}
		if req.TopLogprobs > 0 {
			for j := range req.TopLogprobs {
				d.TopLogprobIDs = append(d.TopLogprobIDs, top[i][j])
				d.TopLogprobs = append(d.TopLogprobs, float32(-0.5*float64(j+1)))
			}
		}
		st.Push(&d)
	}
	st.Push(&Delta{Finished: true, FinishReason: FinishLength, PromptTokens: 2, CompletionTokens: 3})
}

func TestCompletionLogprobsShape(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: logprobFeed}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/completions", `{"prompt":[1,2],"max_tokens":3,"logprobs":2}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if e.lastRequest().TopLogprobs != 2 || !e.lastRequest().Logprobs {
		t.Fatalf("request %+v", e.lastRequest())
	}
	var v struct {
		Choices []struct {
			Logprobs struct {
				Tokens        []string             `json:"tokens"`
				TokenLogprobs []float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]float64 `json:"top_logprobs"`
				TextOffset    []int                `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	lp := v.Choices[0].Logprobs
	str := func(id int32) string { return string(e.tok.TokenBytes(id)) }
	if !slices.Equal(lp.Tokens, []string{str(10), str(11), str(12)}) || !slices.Equal(lp.TokenLogprobs, []float64{-1, -2, -3}) {
		t.Fatalf("tokens %q logprobs %v", lp.Tokens, lp.TokenLogprobs)
	}
	want := []map[string]float64{
		{str(50): -0.5, str(10): -1},
		{str(11): -0.5, str(51): -1},
		{str(52): -0.5, str(53): -1, str(12): -3}, // the sampled token added: up to logprobs+1
	}
	for i := range want {
		if len(lp.TopLogprobs[i]) != len(want[i]) {
			t.Fatalf("position %d: %v, want %v", i, lp.TopLogprobs[i], want[i])
		}
		for k, w := range want[i] {
			if lp.TopLogprobs[i][k] != w {
				t.Fatalf("position %d: %v, want %v", i, lp.TopLogprobs[i], want[i])
			}
		}
	}
	off := 0
	for i, tok := range lp.Tokens {
		if lp.TextOffset[i] != off {
			t.Fatalf("text_offset %v for tokens %q", lp.TextOffset, lp.Tokens)
		}
		off += len([]rune(tok))
	}
	for _, bad := range []string{`"logprobs":21`, `"logprobs":-1`} {
		if resp, body := post(t, ts, "/v1/completions", `{"prompt":[1],`+bad+`}`); resp.StatusCode != 400 || !strings.Contains(body, "logprobs") {
			t.Fatalf("%s: %d %s", bad, resp.StatusCode, body)
		}
	}
}

func TestChatLogprobsShape(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: logprobFeed}}
	ts := newTokServer(t, e, true)
	for _, stream := range []bool{false, true} {
		body := `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"logprobs":true,"top_logprobs":2,"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`
		resp, out := post(t, ts, "/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		type entry struct {
			Token       string  `json:"token"`
			Logprob     float64 `json:"logprob"`
			Bytes       []byte  `json:"-"`
			RawBytes    []int   `json:"bytes"`
			TopLogprobs []struct {
				Token    string  `json:"token"`
				Logprob  float64 `json:"logprob"`
				RawBytes []int   `json:"bytes"`
			} `json:"top_logprobs"`
		}
		var content []entry
		objs := []string{out}
		if stream {
			objs = nil
			for line := range strings.SplitSeq(out, "\n") {
				if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" {
					objs = append(objs, data)
				}
			}
		}
		for _, o := range objs {
			var v struct {
				Choices []struct {
					Logprobs *struct {
						Content []entry `json:"content"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(o), &v); err != nil {
				t.Fatal(err)
			}
			for _, c := range v.Choices {
				if c.Logprobs != nil {
					content = append(content, c.Logprobs.Content...)
				}
			}
		}
		if len(content) != 3 {
			t.Fatalf("stream=%v: %d entries: %s", stream, len(content), out)
		}
		for i, c := range content {
			id := int32(10 + i)
			tb := e.tok.TokenBytes(id)
			if c.Token != string(tb) || c.Logprob != float64(-1-i) || len(c.RawBytes) != len(tb) || len(c.TopLogprobs) != 2 {
				t.Fatalf("stream=%v entry %d: %+v", stream, i, c)
			}
			for j, b := range tb {
				if c.RawBytes[j] != int(b) {
					t.Fatalf("bytes %v, want %v", c.RawBytes, tb)
				}
			}
			if c.TopLogprobs[0].Logprob != -0.5 || c.TopLogprobs[1].Logprob != -1 {
				t.Fatalf("top %+v", c.TopLogprobs)
			}
		}
	}
	for _, bad := range []string{`"top_logprobs":2`, `"logprobs":true,"top_logprobs":21`} {
		resp, out := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],`+bad+`}`)
		if resp.StatusCode != 400 || !strings.Contains(out, "top_logprobs") {
			t.Fatalf("%s: %d %s", bad, resp.StatusCode, out)
		}
	}
}

func TestGenerateTopLogprobs(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: logprobFeed}}
	ts := newTokServer(t, e, true)
	resp, out := post(t, ts, "/generate", `{"input_ids":[1,2],"return_logprob":true,"top_logprobs_num":2,"sampling_params":{"max_new_tokens":3}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	var v struct {
		MetaInfo struct {
			Output [][3]any   `json:"output_token_logprobs"`
			Top    [][][3]any `json:"output_top_logprobs"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.MetaInfo.Output) != 3 || len(v.MetaInfo.Top) != 3 || v.MetaInfo.Top[0][0][1].(float64) != 50 || v.MetaInfo.Top[2][1][0].(float64) != -1 {
		t.Fatalf("%s", out)
	}
	for _, bad := range []string{`"top_logprobs_num":2`, `"return_logprob":true,"logprob_start_len":2`, `"logprob_start_len":0`} {
		resp, out := post(t, ts, "/generate", `{"input_ids":[1,2],`+bad+`}`)
		if resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", bad, resp.StatusCode, out)
		}
	}
}

// TestEchoShapes: echo puts the prompt text first (streamed: in the first chunk), and with
// logprobs the prompt's positions lead the logprobs object, the first one null.
func TestEchoShapes(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{}}
	e.feed = func(st *Stream, req *Request) {
		d := Delta{IDs: []int32{10}, Text: "X", Logprobs: []float32{-1}, PromptTokens: len(req.InputIDs), CompletionTokens: 1}
		if req.PromptLogprobs {
			for p := 1; p < len(req.InputIDs); p++ {
				d.PromptLogprobs = append(d.PromptLogprobs, -float32(p))
			}
		}
		st.Push(&d)
		st.Push(&Delta{Finished: true, FinishReason: FinishLength, PromptTokens: len(req.InputIDs), CompletionTokens: 1})
	}
	ts := newTokServer(t, e, true)
	prompt := e.tok.Encode("def f(x):", true)
	text := e.tok.Decode(prompt, true)
	_, body := post(t, ts, "/v1/completions", `{"prompt":`+mustJSON(prompt)+`,"max_tokens":1,"echo":true,"logprobs":0}`)
	var v struct {
		Choices []struct {
			Text     string `json:"text"`
			Logprobs struct {
				Tokens        []string   `json:"tokens"`
				TokenLogprobs []*float64 `json:"token_logprobs"`
				TopLogprobs   []map[string]float64
				TextOffset    []int `json:"text_offset"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	c := v.Choices[0]
	n := len(prompt)
	if c.Text != text+"X" || len(c.Logprobs.Tokens) != n+1 || c.Logprobs.TokenLogprobs[0] != nil || *c.Logprobs.TokenLogprobs[n] != -1 || !e.lastRequest().PromptLogprobs {
		t.Fatalf("%s", body)
	}
	for p := 1; p < n; p++ {
		if *c.Logprobs.TokenLogprobs[p] != -float64(p) {
			t.Fatalf("prompt position %d: %v", p, *c.Logprobs.TokenLogprobs[p])
		}
	}
	_, body = post(t, ts, "/v1/completions", `{"prompt":"def f(x):","max_tokens":1,"echo":true,"stream":true}`)
	first := ""
	for line := range strings.SplitSeq(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" && first == "" {
			var c struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			_ = json.Unmarshal([]byte(data), &c)
			first = c.Choices[0].Text
		}
	}
	if first != text+"X" || e.lastRequest().PromptLogprobs {
		t.Fatalf("streamed echo: first chunk %q, prompt logprobs asked %v", first, e.lastRequest().PromptLogprobs)
	}
	_, body = post(t, ts, "/v1/completions", `{"prompt":[5,6,7],"max_tokens":1,"prompt_logprobs":0}`)
	var pl struct {
		Choices []struct {
			Text           string                       `json:"text"`
			PromptLogprobs []map[string]json.RawMessage `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &pl); err != nil || pl.Choices[0].Text != "X" || len(pl.Choices[0].PromptLogprobs) != 3 ||
		pl.Choices[0].PromptLogprobs[0] != nil || !strings.Contains(string(pl.Choices[0].PromptLogprobs[2]["7"]), `"logprob":-2`) {
		t.Fatalf("prompt_logprobs: %s", body)
	}
}
