package runner

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
)

// TestLoadStateReports: arrivals count at once, as waiting, until handed to the scheduler, and
// every stamp takes the next sequence number.
func TestLoadStateReports(t *testing.T) {
	s := newLoadState(3, 2)
	t0 := time.Unix(100, 0)
	var b ipc.TokenBatch
	var frame []byte
	s.stamp(&b, &frame, t0)
	if b.Rank != 3 || b.Seq != 1 || b.Load.Waiting != 0 || len(frame) == 0 {
		t.Fatalf("first stamp: rank %d seq %d load %+v, %d-byte frame", b.Rank, b.Seq, b.Load, len(frame))
	}
	s.arrived(1, 10)
	s.arrived(1, 5)
	s.arrived(7, 4) // an owner out of range is queued but has no acknowledgement slot
	s.stamp(&b, nil, t0)
	if g := b.Load.Go; g.Goroutines < 1 || g.HeapInuseBytes == 0 || g.GoVersion != runtime.Version() {
		t.Fatalf("the report lacks the rank's Go runtime stats: %+v", g)
	}
	b.Load.Go = ipc.GoStats{} // checked above; the rest is pinned below
	want := ipc.Load{Waiting: 3, WaitingTokens: 19, Received: []uint64{0, 2}, ReceivedTokens: []uint64{0, 15}}
	if b.Seq != 2 || !reflect.DeepEqual(b.Load, want) {
		t.Fatalf("after arrivals: seq %d load %+v, want %+v", b.Seq, b.Load, want)
	}
	s.handed(3, 19, scheduler.Load{Running: 1, Waiting: 2, WaitingTokens: 12, KVTokensUsed: 7})
	s.stamp(&b, nil, t0)
	b.Load.Go = ipc.GoStats{}
	want = ipc.Load{Running: 1, Waiting: 2, WaitingTokens: 12, KVTokensUsed: 7, Received: []uint64{0, 2}, ReceivedTokens: []uint64{0, 15}}
	if b.Seq != 3 || !reflect.DeepEqual(b.Load, want) {
		t.Fatalf("after handing over: seq %d load %+v, want %+v", b.Seq, b.Load, want)
	}
	if s.quiet(t0.Add(199*time.Millisecond), 200*time.Millisecond) || !s.quiet(t0.Add(200*time.Millisecond), 200*time.Millisecond) {
		t.Fatal("quiet does not measure from the last stamp")
	}
}

func newTestGrammars(t *testing.T) *Grammars {
	t.Helper()
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	return NewGrammars(grammar.NewCompiler(tok, nil, grammar.Options{}))
}

// TestGrammarCompileBounded: a compile ends with its request's context, and waits for a slot
// no longer than its timeout; a normal one yields a matcher.
func TestGrammarCompileBounded(t *testing.T) {
	gs := newTestGrammars(t)
	var wg sync.WaitGroup
	ok := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindJSONObject})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	dead := gs.start(cancelled, &wg, grammar.Spec{Kind: grammar.KindRegex, Text: "a+"})
	wg.Wait()
	if !ok.Ready() || ok.Err() != nil || ok.m == nil {
		t.Fatalf("compile: ready %v err %v", ok.Ready(), ok.Err())
	}
	if !dead.Ready() || !errors.Is(dead.Err(), context.Canceled) {
		t.Fatalf("compile under a cancelled context: ready %v err %v", dead.Ready(), dead.Err())
	}

	// Every slot taken: a request waits its timeout, then fails saying why.
	gs.timeout = time.Millisecond
	for range cap(gs.slots) {
		gs.slots <- struct{}{}
	}
	starved := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindRegex, Text: "b+"})
	wg.Wait()
	if err := starved.Err(); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no compile slot") {
		t.Fatalf("compile with no slot free: %v", err)
	}
	if _, kind := scheduler.Refusal(starved.Err()); kind != scheduler.ErrorInternal {
		t.Errorf("compile with no slot free: error kind %v, want the engine's", kind)
	}
}

// TestGrammarCompileErrorIsTheClients: a grammar the rank's compiler refuses (here one over the
// rank's GBNF byte limit, which the worker's check did not share) fails its request as the
// request's own fault with the compiler's reason, so its client is answered 400; before, it was
// an internal error, a 500.
func TestGrammarCompileErrorIsTheClients(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGrammars(grammar.NewCompiler(tok, nil, grammar.Options{Limits: grammar.Limits{MaxGBNFBytes: 16}}))
	var wg sync.WaitGroup
	for _, s := range []grammar.Spec{
		{Kind: grammar.KindGBNF, Text: `root ::= "a" [0-9]+ "b"`},
		{Kind: grammar.KindGBNF, Text: `root ::= [0-9`},
		{Kind: grammar.KindRegex, Text: `(a`},
	} {
		c := gs.start(context.Background(), &wg, s)
		wg.Wait()
		reason, kind := scheduler.Refusal(c.Err())
		if kind != scheduler.ErrorInvalid || !strings.Contains(reason, "grammar: ") {
			t.Errorf("%v %q: error %v of kind %v, want the compiler's reason as the request's own fault", s.Kind, s.Text, c.Err(), kind)
		}
		t.Logf("%v %q: %s", s.Kind, s.Text, reason)
	}
}

// TestGrammarMaskDeadline: a mask that would take long is given up at its deadline, and the
// constraint then fails its own request with the reason (Err, Accept); a cheap grammar's masks
// are unaffected. Before, FillMask ran to its end however long it took, and the scheduler
// waits for every mask before sampling: one request held the step of all.
func TestGrammarMaskDeadline(t *testing.T) {
	gs := newTestGrammars(t)
	gs.maskDeadline = 2 * time.Millisecond
	// behind a prefix the compile's probe does not reach, 200 `.+` alternatives: compiles,
	// but a mask after the prefix closes 200 configurations per trie node stepped
	var sb strings.Builder
	sb.WriteString(`root ::= "` + strings.Repeat("z", 100) + `" alts` + "\nalts ::= r0")
	for i := 1; i < 200; i++ {
		fmt.Fprintf(&sb, " | r%d", i)
	}
	for i := range 200 {
		fmt.Fprintf(&sb, "\nr%d ::= .+", i)
	}
	var wg sync.WaitGroup
	slow := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindGBNF, Text: sb.String()})
	cheap := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindJSONObject})
	wg.Wait()
	if slow.Err() != nil || cheap.Err() != nil {
		t.Fatalf("compiles: %v, %v", slow.Err(), cheap.Err())
	}
	if !slow.m.AcceptBytes([]byte(strings.Repeat("z", 100) + "x")) {
		t.Fatal("prefix refused")
	}
	mask := make([]uint64, 1<<12)
	start := time.Now()
	slow.FillMask(mask)
	took := time.Since(start)
	t.Logf("slow mask given up after %v: %v", took, slow.Err())
	if err := slow.Err(); err == nil || !errors.Is(err, grammar.ErrMaskDeadline) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("slow mask: Err %v, want the mask deadline", err)
	}
	// the grammar's cost is its client's to fix: the request's own fault (a 4xx), not the engine's
	if _, kind := scheduler.Refusal(slow.Err()); kind != scheduler.ErrorInvalid {
		t.Errorf("slow mask: error kind %v, want the request's own (ErrorInvalid)", kind)
	}
	if took > time.Second {
		t.Errorf("a 2 ms mask deadline took %v", took)
	}
	if err := slow.Accept(0); err == nil {
		t.Error("Accept after a given-up mask succeeded")
	}
	gs.maskDeadline = time.Minute
	cheap.maskDeadline = time.Minute
	cheap.FillMask(mask)
	if cheap.Err() != nil {
		t.Fatalf("cheap mask: %v", cheap.Err())
	}
	var n int
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	if n == 0 {
		t.Fatal("cheap mask allows nothing")
	}
}
