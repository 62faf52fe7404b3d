package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// streamOutcome is what one streamed /generate delivered.
type streamOutcome struct {
	ids        []int32
	completion int
	finish     string
	errEvent   string // an error event's payload, if one came
	done       bool   // [DONE] arrived
	err        error
}

// streamGenerateTo streams a /generate and collects it; first (if not nil) is closed at the
// first event, and hangUp, when set, ends the stream right after it.
func streamGenerateTo(ctx context.Context, e *engine, body map[string]any, first chan<- struct{}, hangUp bool) streamOutcome {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	body["stream"] = true
	var o streamOutcome
	var once sync.Once
	o.err = e.streamEvents(ctx, "/generate", body, func(data []byte) error {
		if first != nil {
			once.Do(func() { close(first) })
		}
		if string(data) == "[DONE]" {
			o.done = true
			return nil
		}
		if strings.Contains(string(data), `"error"`) {
			o.errEvent = string(data)
			return nil
		}
		var c generateResp
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("chunk %q: %w", data, err)
		}
		o.ids = append(o.ids, c.OutputIDs...)
		o.completion = c.MetaInfo.CompletionTokens
		if len(c.MetaInfo.FinishReason) > 0 && string(c.MetaInfo.FinishReason) != "null" {
			o.finish = string(c.MetaInfo.FinishReason)
		}
		if hangUp {
			cancel()
		}
		return nil
	})
	return o
}

// checkWhole fails unless o is a complete, error-free stream of want.
func checkWhole(t *testing.T, what string, o streamOutcome, want []int32) {
	t.Helper()
	if o.err != nil || o.errEvent != "" || !o.done {
		t.Fatalf("%s: err %v, error event %q, [DONE] %v", what, o.err, o.errEvent, o.done)
	}
	if !slices.Equal(o.ids, want) || o.completion != len(want) {
		t.Fatalf("%s: %d ids (completion_tokens %d), want %d; equal: %v", what, len(o.ids), o.completion, len(want), slices.Equal(o.ids, want))
	}
}

// TestSameClientRIDAcrossWorkers: a client's rid is a label on its own request. While one
// client streams under rid "shared", others send the same rid over fresh connections (spread
// over three tokenizer workers), half of them hanging up at once: every one is served on its
// own (none refused as a duplicate, which would say the rid is in use), and the first client
// gets every one of its tokens, none of theirs, and no abort.
func TestSameClientRIDAcrossWorkers(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 3})
	const victimLen = 300
	want := directGenerate(t, promptIDs, victimLen)
	otherPrompt := []int32{5, 77, 301, 9}
	otherWant := directGenerate(t, otherPrompt, 6)

	first := make(chan struct{})
	victim := make(chan streamOutcome, 1)
	go func() {
		victim <- streamGenerateTo(context.Background(), e, map[string]any{"rid": "shared", "input_ids": promptIDs,
			"sampling_params": map[string]any{"max_new_tokens": victimLen, "ignore_eos": true, "temperature": 0}}, first, false)
	}()
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the first client's stream never started")
	}

	var wg sync.WaitGroup
	for i := range 18 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"rid": "shared", "input_ids": otherPrompt,
				"sampling_params": map[string]any{"max_new_tokens": len(otherWant), "ignore_eos": true, "temperature": 0}}
			if i%2 == 1 {
				o := streamGenerateTo(context.Background(), e, body, nil, true)
				if o.err != nil && !errors.Is(o.err, context.Canceled) {
					t.Errorf("client %d (hangs up): %v", i, o.err)
				}
				return
			}
			code, out := postWith(freshClient, e.base+"/generate", body)
			var r generateResp
			if code != 200 || json.Unmarshal([]byte(out), &r) != nil {
				t.Errorf("client %d with the same rid: %d %s", i, code, out)
				return
			}
			if !slices.Equal(r.OutputIDs, otherWant) || r.MetaInfo.ID != "shared" {
				t.Errorf("client %d got ids %v (id %q), want its own %v", i, r.OutputIDs, r.MetaInfo.ID, otherWant)
			}
		}()
	}
	wg.Wait()
	select {
	case o := <-victim:
		checkWhole(t, "the first client", o, want)
	case <-time.After(60 * time.Second):
		t.Fatal("the first client's stream did not end")
	}
}

// workerPID finds the process of tokenizer worker `index` among the supervisor's children.
func workerPID(t *testing.T, e *engine, index int) int {
	t.Helper()
	e.mu.Lock()
	sup := e.procs["tokenizerd"].cmd.Process.Pid
	e.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, dir := range dirs {
			stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
			// pid (comm) state ppid ...; comm may hold spaces, so read after its ')'.
			_, rest, ok := strings.Cut(string(stat), ") ")
			fields := strings.Fields(rest)
			if !ok || len(fields) < 2 || fields[1] != strconv.Itoa(sup) {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
			args := strings.Split(string(cmdline), "\x00")
			if i := slices.Index(args, "--worker-index"); i >= 0 && i+1 < len(args) && args[i+1] == strconv.Itoa(index) {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no process for tokenizer worker %d", index)
	return 0
}

// TestStalledWorkerBlamesNoRank: a tokenizer worker stopped for 5 s (as a long GC pause, swap
// or an overloaded machine would) while its requests stream must not take its own stall for
// the ranks' silence: when it resumes, every request completes with all its tokens.
func TestStalledWorkerBlamesNoRank(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1, dpSize: 2})
	const n = 400
	want := directGenerate(t, promptIDs, n)
	const streams = 4
	results := make(chan streamOutcome, streams)
	firsts := make([]chan struct{}, streams)
	for i := range streams {
		firsts[i] = make(chan struct{})
		go func() {
			results <- streamGenerateTo(context.Background(), e, map[string]any{"input_ids": promptIDs,
				"sampling_params": map[string]any{"max_new_tokens": n, "ignore_eos": true, "temperature": 0}}, firsts[i], false)
		}()
	}
	for i := range streams {
		select {
		case <-firsts[i]:
		case <-time.After(20 * time.Second):
			t.Fatalf("stream %d never started", i)
		}
	}
	pid := workerPID(t, e, 0)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the stall under test
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for i := range streams {
		select {
		case o := <-results:
			checkWhole(t, fmt.Sprintf("stream %d", i), o, want)
		case <-time.After(60 * time.Second):
			t.Fatalf("stream %d did not end after the worker resumed", i)
		}
	}
}

// waitIdle waits until the engine reports every rank up and nothing running, queued or
// holding KV.
func waitIdle(t *testing.T, e *engine, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var l loadReport
	for {
		code := e.getJSON("/health", nil)
		l = loadReport{}
		e.getJSON("/get_load", &l)
		if code == 200 && l.Totals.Running == 0 && l.Totals.Waiting == 0 && l.Totals.KVTokensUsed == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not idle %v after the worker gave up: health %d, load %+v", within, code, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGivenUpRequestsAbortedAtTheRank: a request the worker gives up on is stopped at its rank
// instead of decoding on, a ghost holding a slot and KV, to max_tokens (3000 tokens here, some
// 20 s): when detokd stalls past the rank timeout, and when the worker itself crashes and its
// supervisor restarts it.
func TestGivenUpRequestsAbortedAtTheRank(t *testing.T) {
	long := map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 3000, "ignore_eos": true}}
	start := func(t *testing.T, e *engine) <-chan streamOutcome {
		first := make(chan struct{})
		res := make(chan streamOutcome, 1)
		go func() { res <- streamGenerateTo(context.Background(), e, long, first, false) }()
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			t.Fatal("the stream never started")
		}
		return res
	}
	t.Run("detokd stalls", func(t *testing.T) {
		e := startEngine(t, engineOpts{workers: 1, rankTimeout: 700 * time.Millisecond})
		res := start(t, e)
		e.mu.Lock()
		detokd := e.procs["detokd"].cmd.Process.Pid
		e.mu.Unlock()
		if err := syscall.Kill(detokd, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		select {
		case o := <-res:
			if o.errEvent == "" {
				t.Errorf("the stream ended without an error event: %+v", o)
			}
		case <-time.After(10 * time.Second):
			t.Error("the worker did not give up on the request")
		}
		if err := syscall.Kill(detokd, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, e, 3*time.Second)
	})
	t.Run("worker crashes", func(t *testing.T) {
		e := startEngine(t, engineOpts{workers: 1})
		res := start(t, e)
		if err := syscall.Kill(workerPID(t, e, 0), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-res:
		case <-time.After(10 * time.Second):
			t.Error("the stream outlived its worker")
		}
		e.waitHealthy(30 * time.Second)
		waitIdle(t, e, 3*time.Second)
	})
}

// TestNumericBoundsRefused: numbers a request cannot mean are 400s naming the field, never a
// 500, and never wrapped or rounded into another valid setting (top_k 2^32+1 is not greedy,
// min_new_tokens 2^32 is not 0, a temperature past float32 is not +Inf).
func TestNumericBoundsRefused(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 1})
	for _, c := range []struct {
		path  string
		body  string
		field string
	}{
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"top_k":2147483648}}`, "top_k"},
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"top_k":4294967297}}`, "top_k"},
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":9223372036854775807}}`, "max_"},
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"min_new_tokens":4294967296}}`, "min_"},
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"min_new_tokens":100000}}`, "min_"},
		{"/generate", `{"input_ids":[1,2,3],"stream":true,"sampling_params":{"stream_interval":4294967297}}`, "stream_interval"},
		{"/generate", `{"input_ids":[1,2,3],"sampling_params":{"temperature":3.5e38}}`, "temperature"},
		{"/v1/completions", `{"model":"pico","prompt":[1,2,3],"max_tokens":9223372036854775807}`, "max_tokens"},
		{"/v1/completions", `{"model":"pico","prompt":[1,2,3],"top_k":4294967297}`, "top_k"},
	} {
		code, out := e.postRaw(c.path, c.body)
		if code != 400 || !strings.Contains(string(out), c.field) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", c.path, c.body, code, out, c.field)
		}
	}
}
