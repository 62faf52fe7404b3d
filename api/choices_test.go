package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// seedFeed generates, for a request seeded s, tokens s*10+1 .. s*10+k (k = its max tokens),
// each with logprob -s, one delta a token.
func seedFeed(st *Stream, req *Request) {
	s := int32(0)
	if req.Sampling.Seed != nil {
		s = int32(*req.Sampling.Seed)
	}
	for i := range req.MaxNewTokens {
		time.Sleep(time.Millisecond)
		st.Push(&Delta{IDs: []int32{s*10 + int32(i) + 1}, Text: fmt.Sprintf("<%d>", s*10+int32(i)+1), Logprobs: []float32{-float32(s)},
			PromptTokens: len(req.InputIDs), CachedTokens: 1, CompletionTokens: i + 1})
	}
	st.Push(&Delta{Finished: true, FinishReason: FinishLength, PromptTokens: len(req.InputIDs), CachedTokens: 1, CompletionTokens: req.MaxNewTokens})
}

// rankEngine reports rank 1 for every live request, and records when each request arrived.
type rankEngine struct {
	tokEngine
	mu      sync.Mutex
	arrived map[string]time.Time
}

func (e *rankEngine) RankOf(string) (int, bool) { return 1, true }

type choiceOut struct {
	Index    int     `json:"index"`
	Text     string  `json:"text"`
	TokenIDs []int32 `json:"token_ids"`
	Delta    struct {
		Content string `json:"content"`
	} `json:"delta"`
	Message struct {
		Content string `json:"content"`
	} `json:"message"`
	Finish *string `json:"finish_reason"`
}

type usageOut struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
	Details    struct {
		Cached int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func decodeChoices(t *testing.T, body string) ([]choiceOut, usageOut) {
	t.Helper()
	var v struct {
		Choices []choiceOut `json:"choices"`
		Usage   usageOut    `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v.Choices, v.Usage
}

func TestBatchedPrompts(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: seedFeed}}
	ts := newTokServer(t, e, true)
	for _, prompt := range []string{`[[1,2],[3,4,5],[6]]`, `["a b","c","d e f"]`} {
		resp, body := post(t, ts, "/v1/completions", `{"prompt":`+prompt+`,"max_tokens":2,"return_token_ids":true}`)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		choices, usage := decodeChoices(t, body)
		subs := e.subs[len(e.subs)-3:]
		wantPrompt := 0
		for _, r := range subs {
			wantPrompt += len(r.InputIDs)
		}
		if len(choices) != 3 || usage.Prompt != wantPrompt || usage.Completion != 6 || usage.Total != wantPrompt+6 || usage.Details.Cached != 3 {
			t.Fatalf("%s: %d choices, usage %+v (prompt tokens %d)", prompt, len(choices), usage, wantPrompt)
		}
		for i, c := range choices {
			if c.Index != i || len(c.TokenIDs) != 2 {
				t.Fatalf("choice %d: %+v", i, c)
			}
		}
	}
	for _, bad := range []string{`[]`, `[[1],[]]`, `[[1],[-3]]`, `[1,"a"]`} {
		if resp, body := post(t, ts, "/v1/completions", `{"prompt":`+bad+`}`); resp.StatusCode != 400 {
			t.Fatalf("prompt %s: %d %s", bad, resp.StatusCode, body)
		}
	}
}

func TestNChoicesSeedsAndSiblings(t *testing.T) {
	e := &rankEngine{arrived: map[string]time.Time{}}
	e.feed = func(st *Stream, req *Request) {
		e.mu.Lock()
		e.arrived[req.RID] = time.Now()
		e.mu.Unlock()
		seedFeed(st, req)
	}
	tok, err := picoTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	e.tok = tok
	ts := serveEngine(t, e, true)
	resp, body := post(t, ts, "/v1/completions", `{"prompt":[1,2,3],"max_tokens":3,"n":4,"seed":5,"return_token_ids":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	choices, usage := decodeChoices(t, body)
	if len(choices) != 4 || usage.Prompt != 3 || usage.Completion != 12 {
		t.Fatalf("%d choices, usage %+v", len(choices), usage)
	}
	for j, c := range choices {
		want := []int32{int32(5+j)*10 + 1, int32(5+j)*10 + 2, int32(5+j)*10 + 3}
		if c.Index != j || !slices.Equal(c.TokenIDs, want) {
			t.Fatalf("choice %d: %+v, want ids %v (seed %d)", j, c, want, 5+j)
		}
	}
	subs := e.subs[len(e.subs)-4:]
	first := e.arrived[subs[0].RID]
	for _, r := range subs[1:] {
		if r.RoutedRank != 1 || !e.arrived[r.RID].After(first) {
			t.Fatalf("sibling %s: rank %d, arrived %v after the first", r.RID, r.RoutedRank, e.arrived[r.RID].Sub(first))
		}
	}
	if subs[0].RoutedRank != -1 {
		t.Fatalf("the first candidate was pinned to %d", subs[0].RoutedRank)
	}
}

func TestStreamedChoices(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: seedFeed}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"n":3,"seed":1,"stream":true,
		"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	text := map[int]string{}
	finished := map[int]int{}
	roles := map[int]int{}
	var usage *usageOut
	for data := range sseData(body) {
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usageOut `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			usage = c.Usage
			continue
		}
		if len(c.Choices) != 1 {
			t.Fatalf("chunk with %d choices: %s", len(c.Choices), data)
		}
		ch := c.Choices[0]
		text[ch.Index] += ch.Delta.Content
		if ch.Delta.Role != "" {
			roles[ch.Index]++
		}
		if ch.Finish != nil {
			finished[ch.Index]++
		}
	}
	for j := range 3 {
		s := int32(1 + j)
		want := fmt.Sprintf("<%d><%d><%d><%d>", s*10+1, s*10+2, s*10+3, s*10+4)
		if text[j] != want || finished[j] != 1 || roles[j] != 1 {
			t.Fatalf("choice %d: %q (want %q), %d finishes, %d roles", j, text[j], want, finished[j], roles[j])
		}
	}
	if usage == nil || usage.Completion != 12 || usage.Prompt != len(e.subs[len(e.subs)-1].InputIDs) {
		t.Fatalf("usage %+v", usage)
	}
}

func TestBestOf(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: seedFeed}}
	ts := newTokServer(t, e, true)
	// Seeds 3, 4, 5: logprob -s a token, so the best two are seeds 3 and 4, in that order.
	resp, body := post(t, ts, "/v1/completions", `{"prompt":[1],"max_tokens":2,"n":2,"best_of":3,"seed":3,"return_token_ids":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	choices, usage := decodeChoices(t, body)
	if len(choices) != 2 || choices[0].TokenIDs[0] != 31 || choices[1].TokenIDs[0] != 41 || choices[0].Index != 0 || choices[1].Index != 1 {
		t.Fatalf("choices %+v", choices)
	}
	if usage.Completion != 6 {
		t.Fatalf("usage %+v: every candidate's tokens count", usage)
	}
	if !strings.Contains(body, `"logprobs":null`) {
		t.Fatalf("logprobs shown though not asked for: %s", body)
	}
	for _, bad := range []string{`"n":3,"best_of":2`, `"best_of":2,"stream":true`, `"n":0`, `"n":129`} {
		if resp, body := post(t, ts, "/v1/completions", `{"prompt":[1],`+bad+`}`); resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", bad, resp.StatusCode, body)
		}
	}
}

func TestBatchedGenerate(t *testing.T) {
	e := &tokEngine{feedEngine: feedEngine{feed: seedFeed}}
	ts := newTokServer(t, e, true)
	resp, body := post(t, ts, "/generate", `{"input_ids":[[1,2],[3]],"sampling_params":{"max_new_tokens":2,"seed":4}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var objs []struct {
		Index     int     `json:"index"`
		OutputIDs []int32 `json:"output_ids"`
		MetaInfo  struct {
			ID           string `json:"id"`
			PromptTokens int    `json:"prompt_tokens"`
		} `json:"meta_info"`
	}
	if err := json.Unmarshal([]byte(body), &objs); err != nil || len(objs) != 2 {
		t.Fatalf("%v: %s", err, body)
	}
	for i, o := range objs {
		// Each prompt is its own request, with the same seed: the same outputs.
		if o.Index != i || !slices.Equal(o.OutputIDs, []int32{41, 42}) || o.MetaInfo.PromptTokens != 2-i || o.MetaInfo.ID == objs[1-i].MetaInfo.ID {
			t.Fatalf("object %d: %+v", i, o)
		}
	}
	resp, body = post(t, ts, "/generate", `{"text":["a","b c"],"stream":true,"sampling_params":{"max_new_tokens":3}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	got := map[int]int{}
	for data := range sseData(body) {
		var c struct {
			Index     int     `json:"index"`
			OutputIDs []int32 `json:"output_ids"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		got[c.Index] += len(c.OutputIDs)
	}
	if got[0] != 3 || got[1] != 3 || len(got) != 2 {
		t.Fatalf("streamed ids per index %v", got)
	}
	resp, body = post(t, ts, "/generate", `{"input_ids":[[1,2],[3]],"sampling_params":{"max_new_tokens":1,"seed":4,"n":2}}`)
	objs = nil
	if err := json.Unmarshal([]byte(body), &objs); err != nil || resp.StatusCode != 200 || len(objs) != 4 {
		t.Fatalf("n=2 batch of 2: %d %s", resp.StatusCode, body)
	}
	for i, o := range objs {
		if o.Index != i || o.OutputIDs[0] != int32(4+i%2)*10+1 {
			t.Fatalf("object %d: %+v (want seed %d)", i, o, 4+i%2)
		}
	}
	for _, bad := range []string{`{"input_ids":[[1],[]]}`, `{"text":[]}`, `{"text":["a"],"rid":"x"}`, `{"text":"a","rid":"x","sampling_params":{"n":2}}`} {
		if resp, body := post(t, ts, "/generate", bad); resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", bad, resp.StatusCode, body)
		}
	}
}
