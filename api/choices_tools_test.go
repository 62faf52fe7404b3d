package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
)

// thinkCallFeed writes, for the choice seeded s, a thinking block and a call naming city Cs,
// in 3-byte pieces: the choices' streams interleave, so one parser shared by the choices would
// mix them up.
func thinkCallFeed(st *Stream, req *Request) {
	s := *req.Sampling.Seed
	text := fmt.Sprintf("<think>r%d</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"C%d\"}}\n</tool_call>", s, s)
	n := 0
	for len(text) > 0 {
		m := min(3, len(text))
		n++
		st.Push(&Delta{IDs: []int32{int32(n)}, Text: text[:m], PromptTokens: len(req.InputIDs), CompletionTokens: n})
		text = text[m:]
	}
	st.Push(&Delta{Finished: true, FinishReason: FinishStop, PromptTokens: len(req.InputIDs), CompletionTokens: n})
}

// TestChoicesParseTheirOwnOutput: n=3 with tools and a reasoning parser: every choice has its
// own reasoning and call, streamed (by index) and whole alike.
func TestChoicesParseTheirOwnOutput(t *testing.T) {
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e := &tokEngine{feedEngine: feedEngine{feed: thinkCallFeed}, tok: tok}
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 4096, StreamInterval: 1, ReasoningParser: ReasoningQwen3,
		DefaultSampling: sampling.DefaultParams(), GrammarStrict: true}, e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	req := `{"messages":[{"role":"user","content":"Weather?"}],"n":3,"seed":5,"tool_choice":"required","parallel_tool_calls":false,
		"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	type choice struct {
		reasoning, content, name, args, finish string
	}
	want := func(j int) choice {
		return choice{fmt.Sprintf("r%d", 5+j), "", "get_weather", fmt.Sprintf(`{"city": "C%d"}`, 5+j), "tool_calls"}
	}
	resp, body := post(t, ts, "/v1/chat/completions", req+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var whole struct {
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content   *string `json:"content"`
				Reasoning string  `json:"reasoning_content"`
				ToolCalls []struct {
					Function struct{ Name, Arguments string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			Finish string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &whole); err != nil {
		t.Fatal(err)
	}
	if len(whole.Choices) != 3 {
		t.Fatalf("%s", body)
	}
	for j, c := range whole.Choices {
		m := c.Message
		if c.Index != j || m.Content != nil || len(m.ToolCalls) != 1 {
			t.Fatalf("choice %d: %s", j, body)
		}
		got := choice{m.Reasoning, "", m.ToolCalls[0].Function.Name, m.ToolCalls[0].Function.Arguments, c.Finish}
		if got != want(j) {
			t.Fatalf("whole choice %d: %+v, want %+v", j, got, want(j))
		}
	}
	resp, body = post(t, ts, "/v1/chat/completions", req+`,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	streamed := make([]choice, 3)
	for data := range sseData(body) {
		var ch struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content   string `json:"content"`
					Reasoning string `json:"reasoning_content"`
					ToolCalls []struct {
						Index    int                              `json:"index"`
						Function struct{ Name, Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, c := range ch.Choices {
			s := &streamed[c.Index]
			s.reasoning += c.Delta.Reasoning
			s.content += c.Delta.Content
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index != 0 {
					t.Fatalf("choice %d: a second call: %s", c.Index, data)
				}
				s.name += tc.Function.Name
				s.args += tc.Function.Arguments
			}
			if c.Finish != nil {
				s.finish = *c.Finish
			}
		}
	}
	for j, s := range streamed {
		if s != want(j) {
			t.Fatalf("streamed choice %d: %+v, want %+v", j, s, want(j))
		}
	}
}
