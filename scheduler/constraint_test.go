package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/replay"
)

// allowSet is a small Constraint: it allows the tokens allow accepts (all when allow is nil),
// may end once it accepted canEndAfter tokens, and terminates after stopAfter (0: never). It
// logs its calls so tests can check their order.
type allowSet struct {
	vocab       int
	allow       func(tok int32) bool
	terminable  bool // CanTerminate from the start
	canEndAfter int
	stopAfter   int
	acceptErr   error
	failErr     error // Err's: the constraint's own failure (its compile, a mask given up)
	panicFill   bool
	started     chan struct{} // closed by the first FillMask, when set

	mu       sync.Mutex
	calls    []string
	accepted []int32
}

func (c *allowSet) FillMask(dst []uint64) {
	c.mu.Lock()
	c.calls = append(c.calls, "fill")
	if c.started != nil {
		close(c.started)
		c.started = nil
	}
	c.mu.Unlock()
	if c.panicFill {
		panic("broken grammar")
	}
	for tok := range int32(c.vocab) {
		if c.allow == nil || c.allow(tok) {
			dst[tok/64] |= 1 << (uint(tok) % 64)
		}
	}
}

func (c *allowSet) Err() error { return c.failErr }

func (c *allowSet) Accept(tok int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, "accept")
	if c.acceptErr != nil {
		return c.acceptErr
	}
	if c.allow != nil && !c.allow(tok) {
		return fmt.Errorf("token %d not allowed", tok)
	}
	c.accepted = append(c.accepted, tok)
	return nil
}

func (c *allowSet) CanTerminate() bool {
	return c.terminable || (c.canEndAfter > 0 && len(c.accepted) >= c.canEndAfter)
}

func (c *allowSet) IsTerminated() bool { return c.stopAfter > 0 && len(c.accepted) >= c.stopAfter }

// expectedMasked is the replay runner's greedy output under a mask: its winner when allowed,
// else the lowest allowed token (every other logit is 0).
func expectedMasked(vocab int, prompt []int32, n int, allow func(int32) bool) []int32 {
	ids := append([]int32(nil), prompt...)
	for range n {
		w := replay.Continuation(vocab, ids, 1)[0]
		if !allow(w) {
			for w = 0; !allow(w); w++ {
			}
		}
		ids = append(ids, w)
	}
	return ids[len(prompt):]
}

func TestConstraintMaskHonored(t *testing.T) {
	const vocab = 300
	mult3 := func(tok int32) bool { return tok%3 == 0 }
	s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 4, MaxPrefillTokens: 32, EOS: []int32{2}})
	c := &allowSet{vocab: vocab, allow: mult3, stopAfter: 8}
	p := prompt(5, 7, vocab)
	mustAdd(t, s, &Request{RID: "g", InputIDs: p, MaxNewTokens: 20, Sampling: greedy(), Constraint: c})
	mustAdd(t, s, &Request{RID: "free", InputIDs: p, MaxNewTokens: 20, Sampling: greedy()})
	results := map[string]*result{}
	run(t, s, results, 100)
	r := results["g"]
	wantIDs(t, "constrained", r.ids, expectedMasked(vocab, p, 8, mult3))
	if r.last.FinishReason != FinishStop || r.last.MatchedStopToken != -1 {
		t.Errorf("finish %+v, want stop by termination", r.last)
	}
	wantIDs(t, "accepted", c.accepted, r.ids)
	for i, call := range c.calls {
		if want := [2]string{"fill", "accept"}[i%2]; call != want {
			t.Fatalf("call %d is %s, want %s: %v", i, call, want, c.calls)
		}
	}
	wantIDs(t, "unconstrained neighbour", results["free"].ids, replay.Continuation(vocab, p, 20))
	checkDrained(t, s)
}

func TestConstraintDecidesEOS(t *testing.T) {
	const vocab = 300
	p := prompt(6, 5, vocab)
	eos := replay.Continuation(vocab, p, 1)[0] // the replay runner's first choice
	for _, c := range []struct {
		name     string
		con      *allowSet
		firstEOS bool
	}{
		{"cannot end yet", &allowSet{vocab: vocab, canEndAfter: 3}, false},
		{"can end", &allowSet{vocab: vocab, terminable: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 1, MaxPrefillTokens: 32, EOS: []int32{eos}})
			mustAdd(t, s, &Request{RID: "x", InputIDs: p, MaxNewTokens: 10, Sampling: greedy(), Constraint: c.con})
			results := map[string]*result{}
			run(t, s, results, 100)
			r := results["x"]
			if got := r.ids[0] == eos; got != c.firstEOS {
				t.Fatalf("first token %d, EOS %d: want EOS %v", r.ids[0], eos, c.firstEOS)
			}
			if c.firstEOS {
				if len(r.ids) != 1 || r.last.FinishReason != FinishStop || r.last.MatchedStopToken != eos {
					t.Errorf("finish %+v after %v", r.last, r.ids)
				}
				if len(c.con.accepted) != 0 {
					t.Errorf("EOS was passed to the constraint: %v", c.con.accepted)
				}
			}
			checkDrained(t, s)
		})
	}
}

// waitForMask is a backend whose Forward does not start computing until a constraint's
// FillMask has started: it only completes if the scheduler runs masks during the forward.
type waitForMask struct {
	backend.Backend
	started chan struct{}
}

func (w *waitForMask) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	select {
	case <-w.started:
	case <-time.After(10 * time.Second):
		return nil, errors.New("no mask computation started while the forward step ran")
	}
	return w.Backend.Forward(ctx, b)
}

func TestMaskComputedDuringForward(t *testing.T) {
	const vocab = 128
	started := make(chan struct{})
	w := &waitForMask{Backend: newReplay(t, vocab, 16, 4), started: started}
	s := newScheduler(t, w, Config{MaxRunning: 1, MaxPrefillTokens: 16})
	c := &allowSet{vocab: vocab, started: started}
	mustAdd(t, s, &Request{RID: "x", InputIDs: []int32{1, 2, 3}, MaxNewTokens: 4, Sampling: greedy(), Constraint: c})
	results := map[string]*result{}
	run(t, s, results, 10)
	wantIDs(t, "ids", results["x"].ids, replay.Continuation(vocab, []int32{1, 2, 3}, 4))
}

func TestRequestWaitsUntilConstraintReady(t *testing.T) {
	const vocab = 200
	s := newScheduler(t, newReplay(t, vocab, 32, 4), Config{MaxRunning: 4, MaxPrefillTokens: 32})
	var ready bool
	c := &allowSet{vocab: vocab}
	mustAdd(t, s, &Request{RID: "slow", InputIDs: prompt(1, 5, vocab), MaxNewTokens: 3, Sampling: greedy(),
		Constraint: c, Ready: func() bool { return ready }})
	if s.HasWork() {
		t.Fatal("HasWork with only a compiling request")
	}
	mustAdd(t, s, &Request{RID: "fast", InputIDs: prompt(2, 5, vocab), MaxNewTokens: 3, Sampling: greedy()})
	results := map[string]*result{}
	run(t, s, results, 20)
	if results["fast"] == nil || !results["fast"].last.Finished || results["slow"] != nil {
		t.Fatalf("fast %+v, slow %+v: the compiling request must wait without blocking others", results["fast"], results["slow"])
	}
	if l := s.Load(); l.Waiting != 1 || l.KVTokensUsed != 0 {
		t.Fatalf("load %+v while compiling", l)
	}
	ready = true
	run(t, s, results, 20)
	wantIDs(t, "slow", results["slow"].ids, replay.Continuation(vocab, prompt(1, 5, vocab), 3))
	checkDrained(t, s)
}

func TestConstraintFailuresEndOnlyTheirRequest(t *testing.T) {
	const vocab = 100
	clients := &RequestError{Kind: ErrorInvalid, Err: errors.New("token mask over its deadline")}
	for _, c := range []struct {
		name string
		con  *allowSet
		want string
		kind ErrorKind
	}{
		{"accept error", &allowSet{vocab: vocab, acceptErr: errors.New("bad state")}, "bad state", ErrorInternal},
		{"empty mask", &allowSet{vocab: vocab, allow: func(int32) bool { return false }}, "allows no token", ErrorInternal},
		{"FillMask panics", &allowSet{vocab: vocab, panicFill: true}, "broken grammar", ErrorInternal},
		{"the engine's failure", &allowSet{vocab: vocab, failErr: errors.New("no compile slot")}, "no compile slot", ErrorInternal},
		// the client's grammar (its compile error, a mask over the deadline): the request's own
		// fault, with the reason alone; before, every constraint failure was the engine's
		{"the client's grammar", &allowSet{vocab: vocab, failErr: fmt.Errorf("rank 0: %w", clients)}, "token mask over its deadline", ErrorInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newScheduler(t, newReplay(t, vocab, 16, 4), Config{MaxRunning: 2, MaxPrefillTokens: 16})
			mustAdd(t, s, &Request{RID: "bad", InputIDs: []int32{4, 5}, MaxNewTokens: 5, Sampling: greedy(), Constraint: c.con})
			mustAdd(t, s, &Request{RID: "good", InputIDs: []int32{4, 5}, MaxNewTokens: 5, Sampling: greedy()})
			results := map[string]*result{}
			run(t, s, results, 20)
			if r := results["bad"]; r.last.FinishReason != FinishError || !strings.Contains(r.last.Err, c.want) || r.last.ErrKind != c.kind {
				t.Errorf("bad: %+v, want error %q of kind %v", r.last, c.want, c.kind)
			}
			if r := results["bad"]; c.kind == ErrorInvalid && r.last.Err != c.want {
				t.Errorf("bad: error %q, want the reason alone, %q", r.last.Err, c.want)
			}
			wantIDs(t, "good", results["good"].ids, replay.Continuation(vocab, []int32{4, 5}, 5))
			checkDrained(t, s)
		})
	}
}
