package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/bench/internal/bareserver"
	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

const testVocab = 8192

func mustSeq(t *testing.T, spec string) *tokseq.Sequence {
	t.Helper()
	s, err := tokseq.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// startBare serves the real bare SSE server on a loopback listener, optionally wrapped.
func startBare(t *testing.T, interval time.Duration, wrap func(http.Handler) http.Handler) (*bareserver.Server, string) {
	t.Helper()
	srv, err := bareserver.New(bareserver.Config{Model: "bare", Sequence: *mustSeq(t, "prompt:1,8192"), TokenInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return srv, ts.URL
}

func baseConfig(url string) Config {
	return Config{
		URL: url, Endpoint: "completions", Concurrency: 32, Requests: 64,
		InputLen: 16, OutputLen: 32, Vocab: testVocab, IgnoreEOS: true,
		RequestTimeout: 10 * time.Second, DrainTimeout: 2 * time.Second, Seed: 7,
	}
}

func runOK(t *testing.T, cfg Config) Summary {
	t.Helper()
	sum, err := run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !sum.OK() {
		var b bytes.Buffer
		writeTable(&b, &sum)
		t.Fatalf("violations:\n%s", b.String())
	}
	return sum
}

func TestClosedLoopAllVerified(t *testing.T) {
	_, url := startBare(t, 0, nil)
	cfg := baseConfig(url)
	cfg.ExpectSequence = mustSeq(t, "prompt:1,8192")
	cfg.CheckDrained = true
	sum := runOK(t, cfg)
	if sum.Model != "bare" {
		t.Errorf("model %q, want the one /v1/models lists", sum.Model)
	}
	if sum.Requests != 64 || sum.Completed != 64 || sum.Failed != 0 || sum.Disconnected != 0 {
		t.Errorf("requests %d completed %d failed %d disconnected %d", sum.Requests, sum.Completed, sum.Failed, sum.Disconnected)
	}
	if sum.OutputTokens != 64*32 || sum.ChunksPerRequest != 32 || sum.IDsPerChunk != 1 {
		t.Errorf("tokens %d chunks/req %g ids/chunk %g", sum.OutputTokens, sum.ChunksPerRequest, sum.IDsPerChunk)
	}
	if sum.TTFT.Count != 64 || sum.ITL.Count != 64*31 || sum.E2E.Count != 64 {
		t.Errorf("latency counts ttft %d itl %d e2e %d", sum.TTFT.Count, sum.ITL.Count, sum.E2E.Count)
	}
	if sum.OutputTokPerSec <= 0 || sum.RequestsPerSec <= 0 || sum.TTFT.P50 > sum.TTFT.P99 || sum.TTFT.P99 > sum.E2E.Max+0.1 {
		t.Errorf("numbers not sane: %+v", sum)
	}
	if sum.TextBytes != 0 && sum.TextBytes < 64*32*3 { // " t<id>" is at least 3 bytes
		t.Errorf("text bytes %d", sum.TextBytes)
	}
	if sum.Drain == nil || !sum.Drain.Drained {
		t.Errorf("drain %+v", sum.Drain)
	}
}

func TestChatWithStreamInterval(t *testing.T) {
	_, url := startBare(t, 0, nil)
	cfg := baseConfig(url)
	cfg.Endpoint, cfg.StreamInterval, cfg.Requests, cfg.Concurrency = "chat", 4, 16, 8
	cfg.ExpectSequence = mustSeq(t, "affine:1,1,8192") // text prompts: the sequence starts at key 0
	sum := runOK(t, cfg)
	// First token alone, then 31 tokens in chunks of 4: 1 + 8 chunks.
	if sum.ChunksPerRequest != 9 || sum.OutputTokens != 16*32 {
		t.Errorf("chunks/req %g tokens %d", sum.ChunksPerRequest, sum.OutputTokens)
	}
}

func TestOpenLoop(t *testing.T) {
	_, url := startBare(t, 0, nil)
	cfg := baseConfig(url)
	cfg.Rate, cfg.Concurrency, cfg.Requests = 2000, 0, 40
	sum := runOK(t, cfg)
	if sum.Mode != "open" || sum.Completed != 40 {
		t.Errorf("mode %s completed %d", sum.Mode, sum.Completed)
	}
}

// TestRampSpreadsStarts: with -ramp the streams start one by one over the ramp, so the last
// one starts (and the run ends) no earlier than the ramp's last slot.
func TestRampSpreadsStarts(t *testing.T) {
	_, url := startBare(t, 0, nil)
	cfg := baseConfig(url)
	cfg.Concurrency, cfg.Requests, cfg.Ramp = 4, 4, 400*time.Millisecond
	start := time.Now()
	sum := runOK(t, cfg)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("4 streams ramped over 400ms finished after %s", took)
	}
	if sum.Completed != 4 {
		t.Errorf("completed %d", sum.Completed)
	}
	cfg.Ramp = -time.Second
	if err := cfg.validate(); err == nil {
		t.Error("a negative ramp was accepted")
	}
}

func TestDurationBound(t *testing.T) {
	_, url := startBare(t, time.Millisecond, nil)
	cfg := baseConfig(url)
	cfg.Requests, cfg.Duration, cfg.Concurrency, cfg.OutputLen = 0, 150*time.Millisecond, 4, 8
	start := time.Now()
	sum := runOK(t, cfg)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("duration run took %s", took)
	}
	if sum.Completed < 4 {
		t.Errorf("completed only %d", sum.Completed)
	}
}

func TestDisconnectsLeaveSurvivorsExactAndServerDrained(t *testing.T) {
	srv, url := startBare(t, 200*time.Microsecond, nil)
	cfg := baseConfig(url)
	cfg.Concurrency, cfg.Requests, cfg.OutputLen = 16, 64, 64
	cfg.DisconnectFrac = 0.5
	cfg.ExpectSequence = mustSeq(t, "prompt:1,8192")
	cfg.CheckDrained = true
	sum := runOK(t, cfg)
	if sum.Disconnected < 10 || sum.Completed < 10 || sum.Disconnected+sum.Completed != 64 {
		t.Errorf("disconnected %d completed %d", sum.Disconnected, sum.Completed)
	}
	if sum.Drain == nil || !sum.Drain.Drained || srv.Active() != 0 {
		t.Errorf("drain %+v active %d", sum.Drain, srv.Active())
	}
	// A client may reach its disconnect point just as the server writes the last chunk, so the
	// server can have finished a few more streams than the client kept.
	if got := int(srv.Served()); got < sum.Completed || got > 64 {
		t.Errorf("server finished %d streams, client completed %d", got, sum.Completed)
	}
}

// faultWriter lets a test rewrite the server's SSE events: mutate gets each event (without its
// blank-line terminator) in order and returns the events to send instead.
type faultWriter struct {
	http.ResponseWriter
	n      int
	mutate func(n int, ev string) []string
}

func (f *faultWriter) Write(b []byte) (int, error) {
	if !strings.HasPrefix(f.Header().Get("Content-Type"), "text/event-stream") {
		return f.ResponseWriter.Write(b)
	}
	var out []byte
	for _, ev := range strings.SplitAfter(string(b), "\n\n") {
		if ev == "" {
			continue
		}
		for _, e := range f.mutate(f.n, strings.TrimSuffix(ev, "\n\n")) {
			out = append(out, e+"\n\n"...)
		}
		f.n++
	}
	if _, err := f.ResponseWriter.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (f *faultWriter) Flush() { f.ResponseWriter.(http.Flusher).Flush() }

func withFault(mutate func(n int, ev string) []string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&faultWriter{ResponseWriter: w, mutate: mutate}, r)
		})
	}
}

func TestVerifierCatchesBrokenStreams(t *testing.T) {
	keep := func(ev string) []string { return []string{ev} }
	cases := []struct {
		name   string
		wrap   func(http.Handler) http.Handler
		expect []string // every one of these kinds must be reported
	}{
		{"dropped token", withFault(func(n int, ev string) []string {
			if n == 5 {
				return nil
			}
			return keep(ev)
		}), []string{vUsageCount, vLength, vSequence}},
		{"duplicated chunk", withFault(func(n int, ev string) []string {
			if n == 3 {
				return []string{ev, ev}
			}
			return keep(ev)
		}), []string{vUsageCount, vLength, vSequence}},
		{"swapped id", withFault(func(n int, ev string) []string {
			if n == 2 {
				return []string{strings.Replace(ev, `"token_ids":[`, `"token_ids":[1`, 1)}
			}
			return keep(ev)
		}), []string{vSequence}},
		{"missing done", withFault(func(n int, ev string) []string {
			if ev == "data: [DONE]" {
				return nil
			}
			return keep(ev)
		}), []string{vMissingDone}},
		{"data after done", withFault(func(n int, ev string) []string {
			if ev == "data: [DONE]" {
				return []string{ev, `data: {"choices":[]}`}
			}
			return keep(ev)
		}), []string{vAfterDone}},
		{"wrong usage", withFault(func(n int, ev string) []string {
			return []string{strings.Replace(ev, `"completion_tokens":32`, `"completion_tokens":33`, 1)}
		}), []string{vUsageCount}},
		{"wrong prompt tokens", withFault(func(n int, ev string) []string {
			return []string{strings.Replace(ev, `"prompt_tokens":16`, `"prompt_tokens":17`, 1)}
		}), []string{vPromptCount}},
		{"missing usage", withFault(func(n int, ev string) []string {
			if strings.Contains(ev, `"usage"`) {
				return nil
			}
			return keep(ev)
		}), []string{vMissingUsage}},
		{"repeated usage", withFault(func(n int, ev string) []string {
			if strings.Contains(ev, `"usage"`) {
				return []string{ev, ev}
			}
			return keep(ev)
		}), []string{vUsageTwice}},
		{"missing finish", withFault(func(n int, ev string) []string {
			return []string{strings.Replace(ev, `"finish_reason":"length"`, `"finish_reason":null`, 1)}
		}), []string{vMissingFinish}},
		{"early finish", withFault(func(n int, ev string) []string {
			if n == 4 {
				return []string{strings.Replace(ev, `"finish_reason":null`, `"finish_reason":"stop"`, 1)}
			}
			return keep(ev)
		}), []string{vAfterFinish, vFinishTwice, vFinishReason}},
		{"error event", withFault(func(n int, ev string) []string {
			if n == 6 {
				return []string{ev, `data: {"error":{"message":"boom","type":"server_error","code":500}}`}
			}
			return keep(ev)
		}), []string{vErrorEvent}},
		{"malformed chunk", withFault(func(n int, ev string) []string {
			if n == 1 {
				return []string{strings.Replace(ev, `"token_ids":[`, `"token_ids":[x`, 1)}
			}
			return keep(ev)
		}), []string{vMalformed}},
		{"connection cut", withFault(func(n int, ev string) []string {
			if n == 10 {
				panic(http.ErrAbortHandler)
			}
			return keep(ev)
		}), []string{vTransport}},
		{"http error", func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/models" {
					_, _ = w.Write([]byte(`{"data":[{"id":"bare"}]}`))
					return
				}
				http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			})
		}, []string{vHTTPStatus}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, url := startBare(t, 0, c.wrap)
			cfg := baseConfig(url)
			cfg.Concurrency, cfg.Requests = 4, 8
			cfg.ExpectSequence = mustSeq(t, "prompt:1,8192")
			sum, err := run(context.Background(), cfg, nil)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if sum.OK() || sum.Failed != 8 {
				t.Fatalf("failed %d of 8, violations %v", sum.Failed, sum.ViolationKinds)
			}
			for _, k := range c.expect {
				if sum.ViolationKinds[k] == 0 {
					t.Errorf("no %s violation; got %v, e.g. %v", k, sum.ViolationKinds, sum.FirstViolations)
				}
			}
			if len(sum.FirstViolations) == 0 || sum.FirstViolations[0].Detail == "" {
				t.Errorf("no violation examples kept")
			}
		})
	}
}

func TestNotDrainedIsAViolation(t *testing.T) {
	_, url := startBare(t, 0, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/get_load" {
				_, _ = w.Write([]byte(`{"totals":{"running":0,"waiting":3}}`))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	cfg := baseConfig(url)
	cfg.Concurrency, cfg.Requests, cfg.CheckDrained, cfg.DrainTimeout = 2, 2, true, 120*time.Millisecond
	sum, err := run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum.OK() || sum.ViolationKinds[vDrain] != 1 || sum.Drain.Drained || sum.Drain.Waiting != 3 || sum.Drain.Polls < 2 {
		t.Fatalf("summary %+v drain %+v", sum.ViolationKinds, sum.Drain)
	}
}

func TestCommandExitStatus(t *testing.T) {
	_, good := startBare(t, 0, nil)
	_, bad := startBare(t, 0, withFault(func(n int, ev string) []string {
		if ev == "data: [DONE]" {
			return nil
		}
		return []string{ev}
	}))
	args := []string{"-concurrency", "4", "-requests", "8", "-output-len", "8", "-input-len", "4", "-progress", "0", "-json", "-expect-sequence", "prompt:1,8192"}
	var out, errb bytes.Buffer
	if rc := realMain(append([]string{"-url", good}, args...), &out, &errb); rc != 0 {
		t.Fatalf("good server: exit %d\n%s%s", rc, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "verified    all 8 finished streams exact") || !strings.Contains(out.String(), `"violations":0`) {
		t.Errorf("good server output:\n%s", out.String())
	}
	out.Reset()
	if rc := realMain(append([]string{"-url", bad}, args...), &out, &errb); rc != 1 {
		t.Fatalf("bad server: exit %d\n%s", rc, out.String())
	}
	if !strings.Contains(out.String(), "VIOLATIONS  8: missing_done=8") || !strings.Contains(out.String(), "no [DONE]") {
		t.Errorf("bad server output:\n%s", out.String())
	}
	if rc := realMain([]string{"-url", "http://example.com:80"}, &out, &errb); rc != 2 {
		t.Errorf("remote url: exit %d", rc)
	}
}
