package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// prompt is a fixed id prompt for pico ("def fibonacci(n):\n" and a little more, as ids).
var promptIDs = []int32{400, 1234, 87, 2011, 305, 77, 1024, 9, 66, 180}

type generateResp struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		ID               string          `json:"id"`
		FinishReason     json.RawMessage `json:"finish_reason"`
		PromptTokens     int             `json:"prompt_tokens"`
		CompletionTokens int             `json:"completion_tokens"`
		CachedTokens     int             `json:"cached_tokens"`
	} `json:"meta_info"`
}

// directGenerate runs `schedulerd generate` on the same ids: the reference path with no
// scheduler, sockets or HTTP.
func directGenerate(t *testing.T, ids []int32, maxNew int) []int32 {
	t.Helper()
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	out, err := exec.Command(filepath.Join(binDir, "schedulerd"), "generate", "--model-path", modelPath,
		"--input-ids", strings.Join(s, ","), "--max-new-tokens", fmt.Sprint(maxNew), "--temperature", "0", "--speculative", "off").Output()
	if err != nil {
		t.Fatalf("schedulerd generate: %v", err)
	}
	var res struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("schedulerd generate output %q: %v", out, err)
	}
	return res.OutputIDs
}

func generate(t *testing.T, e *engine, body map[string]any) generateResp {
	t.Helper()
	code, b := e.post("/generate", body)
	if code != 200 {
		t.Fatalf("/generate: %d %s", code, b)
	}
	var r generateResp
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return r
}

// streamGenerate concatenates a streamed /generate's deltas.
func streamGenerate(t *testing.T, e *engine, body map[string]any) (generateResp, int) {
	t.Helper()
	body["stream"] = true
	events, err := e.sseEvents(context.Background(), "/generate", body)
	if err != nil {
		t.Fatalf("stream /generate: %v", err)
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream did not end with [DONE]: %q", events)
	}
	var all generateResp
	for _, ev := range events[:len(events)-1] {
		var c generateResp
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		if strings.Contains(ev, `"error"`) {
			t.Fatalf("error event: %s", ev)
		}
		all.Text += c.Text
		all.OutputIDs = append(all.OutputIDs, c.OutputIDs...)
		all.MetaInfo = c.MetaInfo
	}
	return all, len(events) - 1
}

func TestEngineModes(t *testing.T) {
	want := directGenerate(t, promptIDs, 24)
	if len(want) == 0 {
		t.Fatal("reference generated nothing")
	}
	for _, tc := range []struct {
		name string
		opts engineOpts
	}{
		{"detokd-1worker", engineOpts{workers: 1}},
		{"detokd-3workers", engineOpts{workers: 3}},
		{"skipdetok-1worker", engineOpts{workers: 1, skipDetok: true}},
		{"skipdetok-3workers", engineOpts{workers: 3, skipDetok: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEngine(t, tc.opts)
			// Several requests so that every worker serves some of them (SO_REUSEPORT spreads
			// connections; new connections each time).
			maxChunks := 0 // the most chunks one stream came in
			for i := 0; i < 4; i++ {
				body := map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 24}}
				whole := generate(t, e, body)
				if !slices.Equal(whole.OutputIDs, want) {
					t.Fatalf("greedy /generate %v != schedulerd generate %v", whole.OutputIDs, want)
				}
				if whole.MetaInfo.CompletionTokens != len(whole.OutputIDs) || whole.MetaInfo.PromptTokens != len(promptIDs) {
					t.Fatalf("usage %+v for %d ids", whole.MetaInfo, len(whole.OutputIDs))
				}
				streamed, chunks := streamGenerate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"temperature": 0, "max_new_tokens": 24}})
				if !slices.Equal(streamed.OutputIDs, whole.OutputIDs) || streamed.Text != whole.Text {
					t.Fatalf("streamed (%v %q) != non-streamed (%v %q)", streamed.OutputIDs, streamed.Text, whole.OutputIDs, whole.Text)
				}
				if streamed.MetaInfo.CompletionTokens != len(streamed.OutputIDs) {
					t.Fatalf("streamed completion_tokens %d, got %d ids", streamed.MetaInfo.CompletionTokens, len(streamed.OutputIDs))
				}
				maxChunks = max(maxChunks, chunks)
				// The text equals the tokenizer's decode of the ids.
				code, b := e.post("/detokenize", map[string]any{"tokens": whole.OutputIDs, "skip_special_tokens": true})
				var dt struct{ Text string }
				if code != 200 || json.Unmarshal(b, &dt) != nil || dt.Text != whole.Text {
					t.Fatalf("text %q != decode(ids) %q (%d %s)", whole.Text, dt.Text, code, b)
				}
			}
			// Streams stream: a handler that got to its first write only after the whole stream
			// was generated sends it in one chunk (coalescing, correct), which a busy machine
			// may do now and then, but not on every request.
			if maxChunks < 2 {
				t.Fatalf("every 24-token stream came in %d chunk(s)", maxChunks)
			}
		})
	}
}

// completionStream reads a streamed OpenAI completion (chat or not), checking the chunk shape.
func completionStream(t *testing.T, e *engine, path string, body map[string]any) (text string, ids []int32, usage map[string]int, finish string) {
	t.Helper()
	events, err := e.sseEvents(context.Background(), path, body)
	if err != nil {
		t.Fatal(err)
	}
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("no [DONE]: %q", events)
	}
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				TokenIDs     []int32 `json:"token_ids"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
			Error any            `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		if c.Error != nil {
			t.Fatalf("error event %s", ev)
		}
		for _, ch := range c.Choices {
			text += ch.Text + ch.Delta.Content
			ids = append(ids, ch.TokenIDs...)
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			usage = map[string]int{}
			for k, v := range c.Usage {
				if f, ok := v.(float64); ok {
					usage[k] = int(f)
				}
			}
		}
	}
	return
}

func TestOpenAIEndpoints(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 2})
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if e.getJSON("/v1/models", &models) != 200 || len(models.Data) != 1 || models.Data[0].ID != "pico" {
		t.Fatalf("/v1/models: %+v", models)
	}
	body := map[string]any{"model": "pico", "prompt": "def fibonacci(n):\n", "max_tokens": 20, "temperature": 0,
		"stream": true, "stream_options": map[string]any{"include_usage": true}, "return_token_ids": true}
	text, ids, usage, finish := completionStream(t, e, "/v1/completions", body)
	if usage["completion_tokens"] != len(ids) || len(ids) == 0 || finish == "" {
		t.Fatalf("completions: %d ids, usage %v, finish %q", len(ids), usage, finish)
	}
	delete(body, "stream")
	delete(body, "stream_options")
	code, b := e.post("/v1/completions", body)
	var whole struct {
		Choices []struct {
			Text     string  `json:"text"`
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if code != 200 || json.Unmarshal(b, &whole) != nil || whole.Choices[0].Text != text || !slices.Equal(whole.Choices[0].TokenIDs, ids) {
		t.Fatalf("non-streamed completion %d %s differs from streamed %q %v", code, b, text, ids)
	}
	chat := map[string]any{"model": "pico", "messages": []map[string]any{{"role": "user", "content": "Write a sort function."}},
		"max_tokens": 16, "temperature": 0, "stream": true, "stream_options": map[string]any{"include_usage": true}, "return_token_ids": true}
	_, cids, cusage, _ := completionStream(t, e, "/v1/chat/completions", chat)
	if cusage["completion_tokens"] != len(cids) || cusage["prompt_tokens"] == 0 {
		t.Fatalf("chat usage %v for %d ids", cusage, len(cids))
	}
	var tk struct {
		Tokens []int32 `json:"tokens"`
		Count  int     `json:"count"`
	}
	code, b = e.post("/tokenize", map[string]any{"text": "def f(x):"})
	if code != 200 || json.Unmarshal(b, &tk) != nil || tk.Count == 0 || tk.Count != len(tk.Tokens) {
		t.Fatalf("/tokenize: %d %s", code, b)
	}
	resp, err := httpGet(e.base + "/metrics")
	if err != nil || !strings.Contains(resp, "vllm:time_to_first_token_seconds_bucket") || !strings.Contains(resp, "llm_rank_kv_tokens_capacity") {
		t.Fatalf("/metrics: %v\n%s", err, tail(resp, 2000))
	}
}

func TestOpenAINodeClient(t *testing.T) {
	out := runNodeClient(t, "chat_stream.mjs")
	var res struct {
		Content string `json:"content"`
		Chunks  int    `json:"chunks"`
		Finish  string `json:"finish"`
		Usage   struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Whole string `json:"whole"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	// At least a content chunk and the usage chunk: a 24-token stream the handler first writes
	// after it was all generated (a busy or a fast machine) is one content chunk, correctly.
	if res.Usage.CompletionTokens == 0 || res.Usage.PromptTokens == 0 || res.Finish == "" || res.Content != res.Whole || res.Chunks < 2 {
		t.Fatalf("openai client saw %+v", res)
	}
}

func TestConcurrentStreamsExactAccounting(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 3})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := map[string]any{"model": "pico", "prompt": []int32{int32(100 + i%50), 200, 300, int32(400 + i)}, "max_tokens": 16 + i%8,
				"temperature": 1, "seed": i, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}, "return_token_ids": true}
			events, err := e.sseEvents(context.Background(), "/v1/completions", body)
			if err != nil {
				errs <- err
				return
			}
			var ids int
			var usage int = -1
			for _, ev := range events[:len(events)-1] {
				var c struct {
					Choices []struct {
						TokenIDs []int32 `json:"token_ids"`
					} `json:"choices"`
					Usage *struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				if json.Unmarshal([]byte(ev), &c) != nil {
					errs <- fmt.Errorf("bad chunk %q", ev)
					return
				}
				for _, ch := range c.Choices {
					ids += len(ch.TokenIDs)
				}
				if c.Usage != nil {
					usage = c.Usage.CompletionTokens
				}
			}
			if ids != 16+i%8 || usage != ids || events[len(events)-1] != "[DONE]" {
				errs <- fmt.Errorf("request %d: %d ids, usage %d, want %d", i, ids, usage, 16+i%8)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

type loadReport struct {
	InFlight int `json:"in_flight"`
	Totals   struct {
		Running      int   `json:"running"`
		Waiting      int   `json:"waiting"`
		KVTokensUsed int64 `json:"kv_tokens_used"`
	} `json:"totals"`
}

func TestClientDisconnectFreesKV(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		body := map[string]any{"input_ids": promptIDs, "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": 3000, "ignore_eos": true, "temperature": 0}}
		_, _ = e.sseEvents(ctx, "/generate", body)
	}()
	go func() {
		for {
			var l loadReport
			e.getJSON("/get_load", &l)
			if l.Totals.KVTokensUsed > 0 {
				close(started)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("request never used KV")
	}
	cancel()
	deadline := time.Now().Add(time.Second)
	for {
		var l loadReport
		e.getJSON("/get_load", &l)
		if l.Totals.KVTokensUsed == 0 && l.Totals.Running == 0 && l.InFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("1 s after the disconnect: %+v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadInput(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	cases := []struct {
		name, path, body string
		status           int
		reason           string
	}{
		{"malformed json", "/generate", `{"text": "x"`, 400, "invalid JSON"},
		{"unknown field", "/generate", `{"text": "x", "sampling_params": {"max_new_token": 3}}`, 400, "max_new_token"},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "x"}`, 404, "gpt-9"},
		{"negative temperature", "/v1/completions", `{"prompt": "x", "temperature": -1}`, 400, "temperature"},
		{"top_p zero", "/generate", `{"text": "x", "sampling_params": {"top_p": 0}}`, 400, "top_p"},
		{"stream_interval 0", "/generate", `{"text": "x", "sampling_params": {"stream_interval": 0}}`, 400, "stream_interval"},
		{"over context", "/generate", `{"input_ids": [1,2,3], "sampling_params": {"max_new_tokens": 100000}}`, 400, "context length"},
		{"n=0", "/v1/completions", `{"prompt": "x", "n": 0}`, 400, "n: must be in [1, 128]"},
		{"empty messages", "/v1/chat/completions", `{"messages": []}`, 400, "messages"},
		{"bad token id", "/generate", `{"input_ids": [1, 99999999]}`, 400, "out of range"},
		{"no prompt", "/generate", `{}`, 400, "required"},
	}
	for _, c := range cases {
		code, b := e.postRaw(c.path, c.body)
		if code != c.status || !strings.Contains(string(b), c.reason) {
			t.Errorf("%s: got %d %s, want %d mentioning %q", c.name, code, b, c.status, c.reason)
		}
	}
	// Nothing was lost: the engine still serves.
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0}})
	if len(r.OutputIDs) == 0 {
		t.Fatal("engine stopped serving after bad input")
	}
}

func TestSkipTokenizerInit(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1, skipTokInit: true})
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"text": "hello"}`},
		{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`},
		{"/generate", `{"input_ids": [1,2], "sampling_params": {"stop": ["x"]}}`},
		{"/v1/completions", `{"prompt": [1,2], "response_format": {"type": "json_object"}}`},
		{"/tokenize", `{"text": "x"}`},
	} {
		code, b := e.postRaw(c.path, c.body)
		if code != 400 || !strings.Contains(string(b), "--skip-tokenizer-init") {
			t.Errorf("%s %s: got %d %s, want 400 naming --skip-tokenizer-init", c.path, c.body, code, b)
		}
	}
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 8, "temperature": 0}})
	if len(r.OutputIDs) == 0 || r.MetaInfo.CompletionTokens != len(r.OutputIDs) {
		t.Fatalf("ids-only generate: %+v", r)
	}
}

func TestProcessDeathFailsRequests(t *testing.T) {
	for _, victim := range []string{"detokd", "schedulerd0"} {
		t.Run(victim, func(t *testing.T) {
			e := startEngine(t, engineOpts{workers: 1, rankTimeout: 700 * time.Millisecond})
			done := make(chan []string, 1)
			go func() {
				body := map[string]any{"input_ids": promptIDs, "stream": true,
					"sampling_params": map[string]any{"max_new_tokens": 3000, "ignore_eos": true}}
				ev, _ := e.sseEvents(context.Background(), "/generate", body)
				done <- ev
			}()
			usageDone := make(chan clientStream, 1)
			go func() {
				usageDone <- readCompletionStream(context.Background(), e, map[string]any{"prompt": promptIDs, "max_tokens": 3000,
					"ignore_eos": true, "stream": true, "return_token_ids": true, "stream_options": map[string]any{"include_usage": true}}, nil)
			}()
			time.Sleep(500 * time.Millisecond)
			e.kill(victim)
			select {
			case ev := <-done:
				if len(ev) == 0 || !strings.Contains(ev[len(ev)-2], "error") {
					t.Fatalf("stream ended without an error event: %q", ev[max(0, len(ev)-3):])
				}
				// An OpenAI stream that failed with it reports, in its usage chunk, the ids it
				// delivered (issue 29, item 2), not 0.
				if r := <-usageDone; !r.errEvent || r.ids == 0 || r.usage != r.ids {
					t.Errorf("failed completions stream: %d ids, error event %v, usage %d", r.ids, r.errEvent, r.usage)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("in-flight request hung after the process died")
			}
			var h map[string]any
			if code := e.getJSON("/health", &h); code != 503 {
				t.Fatalf("/health after %s died: %d %v", victim, code, h)
			}
			e.restart(victim)
			e.waitHealthy(30 * time.Second)
			r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 4}})
			if len(r.OutputIDs) == 0 {
				t.Fatal("no output after restart")
			}
		})
	}
}
