package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Streaming under load (issue 5), end to end on the real processes with the token-replay
// benchmark backend: stream interval shape, coalescing for a stalled client, errors after every
// delivered token, interval validation, and exact accounting with client disconnects.

func streamReplayArgs(step time.Duration) []string {
	return append(replayArgs(step), "--max-running-requests", "1024")
}

// streamPrompt is a fixed id prompt; replay output depends only on it.
var streamPrompt = []int32{11, 22, 33, 44, 55, 66, 77, 88}

// nativeChunk is one streamed /generate event.
type nativeChunk struct {
	Text      string  `json:"text"`
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason     json.RawMessage `json:"finish_reason"`
		CompletionTokens int             `json:"completion_tokens"`
	} `json:"meta_info"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// nativeStream streams /generate and returns each chunk's ids, the concatenated text, the
// last chunk (finish and usage) and the error events.
func nativeStream(t *testing.T, e *engine, body map[string]any, onChunk func(i int)) (chunks [][]int32, text string, last nativeChunk, errs []string) {
	t.Helper()
	body["stream"] = true
	done := false
	err := e.streamEvents(context.Background(), "/generate", body, func(data []byte) error {
		if string(data) == "[DONE]" {
			done = true
			return nil
		}
		var c nativeChunk
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("chunk %q: %w", data, err)
		}
		if c.Error != nil {
			errs = append(errs, c.Error.Message)
			return nil
		}
		chunks = append(chunks, c.OutputIDs)
		text += c.Text
		last = c
		if onChunk != nil {
			onChunk(len(chunks))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("stream /generate: %v", err)
	}
	if !done {
		t.Fatalf("stream did not end with [DONE]")
	}
	return chunks, text, last, errs
}

func wholeGenerate(t *testing.T, e *engine, ids []int32, n int) (outIDs []int32, text string) {
	t.Helper()
	r := generate(t, e, map[string]any{"input_ids": ids, "sampling_params": map[string]any{"max_new_tokens": n, "ignore_eos": true, "temperature": 0}})
	return r.OutputIDs, r.Text
}

// TestStreamIntervalEndToEnd: with stream interval K the client receives the first token alone,
// then K-token chunks, then the remainder with the finish. Consecutive K-chunks may merge when
// the client falls behind (that is coalescing, never loss), so a chunk after the first holds a
// multiple of K, and the last holds the remainder plus any multiple of K.
func TestStreamIntervalEndToEnd(t *testing.T) {
	const n = 64
	// 10 ms steps: the SSE writer must take the first token before the next steps land, which a
	// loaded 2-core machine does not always do within 2 ms steps.
	e := startEngine(t, engineOpts{schedArgs: streamReplayArgs(10 * time.Millisecond), tokArgs: []string{"--stream-interval", "3"}})
	want, wantText := wholeGenerate(t, e, streamPrompt, n)
	if len(want) != n {
		t.Fatalf("reference has %d ids", len(want))
	}
	for _, tc := range []struct {
		name string
		k    int
		set  bool // false: the server default (--stream-interval 3)
	}{{"1", 1, true}, {"3-default", 3, false}, {"16", 16, true}} {
		t.Run(tc.name, func(t *testing.T) {
			sp := map[string]any{"max_new_tokens": n, "ignore_eos": true, "temperature": 0}
			if tc.set {
				sp["stream_interval"] = tc.k
			}
			chunks, text, last, errs := nativeStream(t, e, map[string]any{"input_ids": streamPrompt, "sampling_params": sp}, nil)
			checkIntervalShape(t, chunkSizes(chunks), tc.k, n)
			if got := slices.Concat(chunks...); !slices.Equal(got, want) || text != wantText {
				t.Fatalf("streamed ids/text differ from the non-streamed ones:\n%v %q\n%v %q", got, text, want, wantText)
			}
			if len(errs) > 0 || last.MetaInfo.CompletionTokens != n {
				t.Fatalf("errors %v, completion_tokens %d", errs, last.MetaInfo.CompletionTokens)
			}
		})
	}
	// The OpenAI extension field.
	var sizes []int
	err := e.streamEvents(context.Background(), "/v1/completions", map[string]any{"prompt": streamPrompt, "max_tokens": n,
		"ignore_eos": true, "temperature": 0, "stream": true, "stream_interval": 16, "return_token_ids": true}, func(data []byte) error {
		var c struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if string(data) != "[DONE]" && json.Unmarshal(data, &c) == nil && len(c.Choices) > 0 && len(c.Choices[0].TokenIDs) > 0 {
			sizes = append(sizes, len(c.Choices[0].TokenIDs))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkIntervalShape(t, sizes, 16, n)
}

// chunkSizes returns the number of ids of each non-empty chunk.
func chunkSizes(chunks [][]int32) []int {
	sizes := make([]int, 0, len(chunks))
	for _, c := range chunks {
		if len(c) > 0 {
			sizes = append(sizes, len(c))
		}
	}
	return sizes
}

// checkIntervalShape checks the ids per chunk (none empty) of a stream with interval k.
func checkIntervalShape(t *testing.T, sizes []int, k, n int) {
	t.Helper()
	total := 0
	for _, s := range sizes {
		total += s
	}
	rest := (n - 1) % k // what is left after the first token and whole K-chunks
	if rest == 0 {
		rest = k
	}
	bad := total != n || sizes[0] != 1
	for _, s := range sizes[1 : len(sizes)-1] {
		bad = bad || s%k != 0
	}
	if len(sizes) > 1 {
		bad = bad || sizes[len(sizes)-1]%k != rest%k
	}
	if bad {
		t.Fatalf("interval %d: chunk sizes %v (total %d of %d): want 1, then multiples of %d, then %d plus a multiple", k, sizes, total, n, k, rest)
	}
	t.Logf("interval %d: chunk sizes %v", k, sizes)
}

// TestStreamIntervalRefused: 0, negative and non-integer intervals are a 400; --stream-interval 0
// stops tokenizerd at startup.
func TestStreamIntervalRefused(t *testing.T) {
	e := startEngine(t, engineOpts{schedArgs: streamReplayArgs(0)})
	for _, c := range []struct{ path, body string }{
		{"/generate", `{"input_ids":[1,2],"stream":true,"sampling_params":{"stream_interval":0}}`},
		{"/generate", `{"input_ids":[1,2],"stream":true,"sampling_params":{"stream_interval":-1}}`},
		{"/generate", `{"input_ids":[1,2],"sampling_params":{"stream_interval":2.5}}`},
		{"/v1/completions", `{"prompt":[1,2],"stream":true,"stream_interval":0}`},
		{"/v1/completions", `{"prompt":[1,2],"stream":true,"stream_interval":1.5}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_interval":0}`},
	} {
		code, b := e.postRaw(c.path, c.body)
		if code != 400 || !strings.Contains(string(b), "stream_interval") {
			t.Errorf("%s %s: %d %s, want 400 naming stream_interval", c.path, c.body, code, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "tokenizerd"), "serve", "--model-path", modelPath,
		"--run-dir", dir, "--port", fmt.Sprint(freePort(t)), "--stream-interval", "0").CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "stream-interval") {
		t.Fatalf("tokenizerd --stream-interval 0: err %v, output %s", err, out)
	}
}

// TestStreamStalledClient: a client that stops reading for a while loses nothing. Once the
// connection's buffers are full the server's writer blocks, and everything generated meanwhile
// arrives merged in bigger chunks, in order, with exact usage.
func TestStreamStalledClient(t *testing.T) {
	const n = 20000
	long := []string{"--context-length", "32768"}
	e := startEngine(t, engineOpts{schedArgs: append(streamReplayArgs(0), long...), tokArgs: long})
	want, wantText := wholeGenerate(t, e, streamPrompt, n)
	chunks, text, last, errs := nativeStream(t, e, map[string]any{"input_ids": streamPrompt,
		"sampling_params": map[string]any{"max_new_tokens": n, "ignore_eos": true, "temperature": 0}},
		func(i int) {
			if i == 2 {
				time.Sleep(3 * time.Second) // longer than the whole generation takes
			}
		})
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	got := slices.Concat(chunks...)
	if !slices.Equal(got, want) || text != wantText || last.MetaInfo.CompletionTokens != n {
		t.Fatalf("got %d ids (match %v), text match %v, completion_tokens %d; want %d", len(got), slices.Equal(got, want), text == wantText, last.MetaInfo.CompletionTokens, n)
	}
	biggest := 0
	for _, c := range chunks {
		biggest = max(biggest, len(c))
	}
	if biggest < 100 || len(chunks) > n/4 {
		t.Fatalf("%d chunks for %d tokens, biggest %d: chunks did not grow while the client stalled", len(chunks), n, biggest)
	}
	t.Logf("%d tokens in %d chunks, biggest %d", n, len(chunks), biggest)
}

// TestStreamErrorAfterDeliveredTokens kills schedulerd mid-stream (interval 16): the client gets
// the tokens the rank sent, in order and without duplicates, then an error event, then [DONE].
func TestStreamErrorAfterDeliveredTokens(t *testing.T) {
	const n = 2000
	e := startEngine(t, engineOpts{schedArgs: streamReplayArgs(time.Millisecond), rankTimeout: 500 * time.Millisecond})
	want, _ := wholeGenerate(t, e, streamPrompt, n)
	var once sync.Once
	chunks, _, _, errs := nativeStream(t, e, map[string]any{"input_ids": streamPrompt,
		"sampling_params": map[string]any{"max_new_tokens": n, "ignore_eos": true, "temperature": 0, "stream_interval": 16}},
		func(i int) {
			if i == 4 {
				once.Do(func() { e.kill("schedulerd0") })
			}
		})
	got := slices.Concat(chunks...)
	if len(errs) != 1 || !strings.Contains(errs[0], "rank 0") {
		t.Fatalf("error events %q, want one naming the rank", errs)
	}
	if len(got) < 1+3*16 || len(got) >= n || !slices.Equal(got, want[:len(got)]) {
		t.Fatalf("received %d ids before the error; they must be a prefix of the %d generated", len(got), n)
	}
}

// TestStreamAccountingWithDisconnects runs the load generator (which checks every stream: ids
// = usage = max_tokens, one finish, usage, [DONE]) with 10% of clients disconnecting at random
// points, then checks the engine has nothing left running.
func TestStreamAccountingWithDisconnects(t *testing.T) {
	lg := buildLoadgen(t)
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := startEngine(t, engineOpts{workers: workers, schedArgs: streamReplayArgs(0)})
			out, err := exec.Command(lg, "-url", e.base, "-concurrency", "128", "-requests", "640", "-input-len", "16",
				"-output-len", "256", "-disconnect-frac", "0.1", "-check-drained", "-drain-timeout", "10s", "-progress", "0", "-json").CombinedOutput()
			if err != nil {
				t.Fatalf("loadgen: %v\n%s", err, out)
			}
			var sum struct {
				Completed    int `json:"completed"`
				Disconnected int `json:"disconnected"`
				Violations   int `json:"violations"`
				Drain        struct {
					Drained bool `json:"drained"`
				} `json:"drain"`
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
				t.Fatalf("summary: %v\n%s", err, out)
			}
			if sum.Violations != 0 || !sum.Drain.Drained || sum.Completed+sum.Disconnected != 640 || sum.Disconnected == 0 {
				t.Fatalf("summary %+v\n%s", sum, out)
			}
		})
	}
}

var (
	loadgenOnce sync.Once
	loadgenBin  string
	loadgenErr  error
)

func buildLoadgen(t *testing.T) string {
	t.Helper()
	loadgenOnce.Do(func() {
		loadgenBin = filepath.Join(binDir, "loadgen")
		cmd := exec.Command("go", "build", "-o", loadgenBin, "./bench/loadgen")
		cmd.Dir = ".."
		cmd.Stderr = os.Stderr
		loadgenErr = cmd.Run()
	})
	if loadgenErr != nil {
		t.Fatalf("build loadgen: %v", loadgenErr)
	}
	return loadgenBin
}
