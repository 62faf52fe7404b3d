package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/tokenizer"
)

// feedEngine is the worker's side of the API for tests: Submit hands out a Stream and runs feed
// on it in a goroutine, as the worker's receive loop would push outputs.
type feedEngine struct {
	feed func(st *Stream, req *Request)
	mu   sync.Mutex
	subs []*Request
}

func (e *feedEngine) Submit(_ context.Context, req *Request) (*Stream, error) {
	e.mu.Lock()
	e.subs = append(e.subs, req)
	e.mu.Unlock()
	st := NewStream(req.RID)
	go e.feed(st, req)
	return st, nil
}
func (e *feedEngine) Abort(string)                           {}
func (e *feedEngine) Tokenizer() *tokenizer.Tokenizer        { return nil }
func (e *feedEngine) CheckGrammar(GrammarKind, string) error { return nil }
func (e *feedEngine) Health() error                          { return nil }
func (e *feedEngine) Load() LoadReport                       { return LoadReport{} }
func (e *feedEngine) NewRID() string                         { return fmt.Sprintf("r%d", time.Now().UnixNano()) }

func (e *feedEngine) lastRequest() *Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.subs[len(e.subs)-1]
}

// smallBufListener shrinks every accepted connection's send buffer, so a handler whose client
// stops reading blocks in Write after a few KiB instead of after megabytes.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func newTestServer(t *testing.T, e *feedEngine, interval int) *httptest.Server {
	t.Helper()
	srv, err := NewServer(Config{ServedModelName: "m", ContextLength: 1 << 20, StreamInterval: interval, SkipTokenizerInit: true,
		DefaultSampling: sampling.DefaultParams()},
		e, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Listener = smallBufListener{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// sseChunk is what the tests read from one completion chunk.
type sseChunk struct {
	IDs    []int32
	Text   string
	Finish *string
	Usage  *struct {
		CompletionTokens int `json:"completion_tokens"`
	}
	Err string
}

// openSSE posts a streamed completion and returns a reader of its events; the connection has a
// small receive buffer so that a reader that stops reading holds the server back.
func openSSE(t *testing.T, ts *httptest.Server, extra string) (*bufio.Reader, func()) {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	body := `{"prompt":[1,2,3],"max_tokens":100000,"stream":true,"stream_options":{"include_usage":true}` + extra + `}`
	resp, err := (&http.Client{Transport: tr}).Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return bufio.NewReaderSize(resp.Body, 1<<16), func() { resp.Body.Close(); tr.CloseIdleConnections() }
}

// nextEvent reads one SSE event; done reports [DONE].
func nextEvent(t *testing.T, r *bufio.Reader) (c sseChunk, done bool) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v", err)
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return c, true
		}
		var raw struct {
			Choices []struct {
				Text         string  `json:"text"`
				TokenIDs     []int32 `json:"token_ids"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if raw.Error != nil {
			c.Err = raw.Error.Message
		}
		if len(raw.Choices) > 0 {
			c.IDs, c.Text, c.Finish = raw.Choices[0].TokenIDs, raw.Choices[0].Text, raw.Choices[0].FinishReason
		}
		c.Usage = raw.Usage
		return c, false
	}
}

// sseData yields the data payloads of a whole SSE body, in order, without the final [DONE].
func sseData(body string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for line := range strings.SplitSeq(body, "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			if !yield(data) {
				return
			}
		}
	}
}

// tokenText is the text the test engine sends with token i.
func tokenText(i int) string { return fmt.Sprintf("<%d>", i) }

// TestSSEStalledClientGetsBiggerChunksAndLosesNothing stops reading after the first chunk while
// the engine pushes n tokens as separate deltas: the writer blocks on the full connection,
// everything pushed meanwhile merges, and once the client reads again it receives every token
// exactly once, in order, in far fewer chunks than tokens.
func TestSSEStalledClientGetsBiggerChunksAndLosesNothing(t *testing.T) {
	const n = 3000
	pushed, firstRead := make(chan struct{}), make(chan struct{})
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		for i := range n {
			st.Push(&Delta{IDs: []int32{int32(i)}, Text: tokenText(i), CompletionTokens: i + 1, PromptTokens: 3})
			if i == 0 {
				<-firstRead
			}
		}
		st.Push(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: n, PromptTokens: 3})
		close(pushed)
	}}
	ts := newTestServer(t, e, 1)
	r, closeBody := openSSE(t, ts, `,"return_token_ids":true`)
	defer closeBody()

	first, _ := nextEvent(t, r)
	close(firstRead)
	select {
	case <-pushed: // stalled: every token is pushed before we read on
	case <-time.After(10 * time.Second):
		t.Fatal("engine did not finish pushing")
	}
	ids := append([]int32(nil), first.IDs...)
	text := first.Text
	chunks, biggest, usage := 1, len(first.IDs), -1
	for {
		c, done := nextEvent(t, r)
		if done {
			break
		}
		if c.Err != "" {
			t.Fatalf("error event: %s", c.Err)
		}
		if c.Usage != nil {
			usage = c.Usage.CompletionTokens
			continue
		}
		if len(c.IDs) > 0 {
			chunks++
			biggest = max(biggest, len(c.IDs))
		}
		ids = append(ids, c.IDs...)
		text += c.Text
	}
	for i, id := range ids {
		if id != int32(i) {
			t.Fatalf("id #%d is %d: tokens lost or duplicated (%d ids received)", i, id, len(ids))
		}
	}
	var want strings.Builder
	for i := range n {
		want.WriteString(tokenText(i))
	}
	if len(ids) != n || text != want.String() || usage != n {
		t.Fatalf("received %d ids, %d text bytes (want %d), usage %d; want %d of each", len(ids), len(text), want.Len(), usage, n)
	}
	if chunks > n/4 || biggest < 16 {
		t.Fatalf("a stalled client got %d chunks for %d tokens (biggest %d ids): chunks did not grow", chunks, n, biggest)
	}
	t.Logf("%d tokens in %d chunks, biggest %d ids", n, chunks, biggest)
}

// TestSSEFastClientGetsOneChunkPerDelta pushes the next token only after the client has read
// the previous one: nothing is merged or held back.
func TestSSEFastClientGetsOneChunkPerDelta(t *testing.T) {
	const n = 50
	next := make(chan struct{})
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		for i := range n {
			st.Push(&Delta{IDs: []int32{int32(i)}, Text: tokenText(i), CompletionTokens: i + 1})
			<-next
		}
		st.Push(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: n})
	}}
	ts := newTestServer(t, e, 1)
	r, closeBody := openSSE(t, ts, `,"return_token_ids":true`)
	defer closeBody()
	for i := range n {
		c, done := nextEvent(t, r)
		if done || len(c.IDs) != 1 || c.IDs[0] != int32(i) || c.Text != tokenText(i) {
			t.Fatalf("chunk %d: ids %v done %v", i, c.IDs, done)
		}
		next <- struct{}{}
	}
	c, _ := nextEvent(t, r)
	if c.Finish == nil || *c.Finish != "length" || len(c.IDs) != 0 {
		t.Fatalf("last chunk: finish %v ids %v", c.Finish, c.IDs)
	}
}

// TestSSEErrorFollowsEveryToken: tokens pushed before an error all reach the client, in a
// content chunk before the error event.
func TestSSEErrorFollowsEveryToken(t *testing.T) {
	const n = 37
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		for i := range n {
			st.Push(&Delta{IDs: []int32{int32(i)}, Text: "x", CompletionTokens: i + 1})
		}
		st.Push(&Delta{Finished: true, FinishReason: FinishError, Err: errors.New("rank 0 is down")})
	}}
	ts := newTestServer(t, e, 16)
	r, closeBody := openSSE(t, ts, `,"return_token_ids":true`)
	defer closeBody()
	var ids []int32
	sawErr := false
	for {
		c, done := nextEvent(t, r)
		if done {
			break
		}
		if c.Err != "" {
			if len(ids) != n {
				t.Fatalf("error event after %d of %d tokens", len(ids), n)
			}
			sawErr = true
			continue
		}
		if sawErr && len(c.IDs) > 0 {
			t.Fatalf("ids after the error event: %v", c.IDs)
		}
		ids = append(ids, c.IDs...)
	}
	if !sawErr || len(ids) != n {
		t.Fatalf("error event seen %v, %d ids, want %d", sawErr, len(ids), n)
	}
}

// TestSSEStreamInterval: with stream_interval K the writer sends the first token alone, then
// waits for at least K tokens per chunk, and sends the rest with the finish. (The runner's gate
// makes the chunks exactly K; the e2e tests check that shape through the real processes.)
func TestSSEStreamInterval(t *testing.T) {
	for _, k := range []int{1, 3, 16} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			const n = 50
			firstRead := make(chan struct{})
			e := &feedEngine{feed: func(st *Stream, req *Request) {
				for i := range n {
					st.Push(&Delta{IDs: []int32{int32(i)}, CompletionTokens: i + 1})
					if i == 0 {
						// the runner's gate sends the first token alone; here the writer
						// must not find a second one pending when it takes the first
						select {
						case <-firstRead:
						case <-time.After(5 * time.Second):
						}
					}
					time.Sleep(100 * time.Microsecond)
				}
				st.Push(&Delta{Finished: true, FinishReason: FinishLength, CompletionTokens: n})
			}}
			ts := newTestServer(t, e, 1)
			r, closeBody := openSSE(t, ts, fmt.Sprintf(`,"return_token_ids":true,"stream_interval":%d`, k))
			defer closeBody()
			if got := e.lastRequest().StreamInterval; got != k {
				t.Fatalf("request stream interval %d, want %d", got, k)
			}
			var sizes []int
			var ids []int32
			for {
				c, done := nextEvent(t, r)
				if done {
					break
				}
				if len(c.IDs) > 0 {
					if len(sizes) == 0 {
						close(firstRead)
					}
					sizes = append(sizes, len(c.IDs))
					ids = append(ids, c.IDs...)
				}
			}
			if len(ids) != n || sizes[0] != 1 {
				t.Fatalf("chunk sizes %v (%d ids)", sizes, len(ids))
			}
			for i, id := range ids {
				if id != int32(i) {
					t.Fatalf("id #%d is %d", i, id)
				}
			}
			for i, s := range sizes[1 : len(sizes)-1] {
				if s < k {
					t.Fatalf("chunk %d has %d ids, fewer than the interval %d: %v", i+1, s, k, sizes)
				}
			}
		})
	}
}

func TestStreamIntervalValidation(t *testing.T) {
	e := &feedEngine{feed: func(st *Stream, req *Request) {
		st.Push(&Delta{IDs: []int32{1}, Finished: true, FinishReason: FinishLength, CompletionTokens: 1})
	}}
	ts := newTestServer(t, e, 1)
	for _, c := range []struct {
		path, body string
	}{
		{"/v1/completions", `{"prompt":[1],"stream":true,"stream_interval":0}`},
		{"/v1/completions", `{"prompt":[1],"stream":true,"stream_interval":-2}`},
		{"/v1/completions", `{"prompt":[1],"stream":true,"stream_interval":2.5}`},
		{"/v1/completions", `{"prompt":[1],"stream":true,"stream_interval":"3"}`},
		{"/generate", `{"input_ids":[1],"stream":true,"sampling_params":{"stream_interval":0}}`},
		{"/generate", `{"input_ids":[1],"stream":true,"sampling_params":{"stream_interval":1.5}}`},
	} {
		resp, err := http.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "stream_interval") {
			t.Errorf("%s %s: status %d %s, want 400 naming stream_interval", c.path, c.body, resp.StatusCode, b)
		}
	}
	if _, err := NewServer(Config{ServedModelName: "m", StreamInterval: 0}, e, metrics.NewRegistry(), slog.Default()); err == nil {
		t.Error("a server default stream interval of 0 was accepted")
	}
}
