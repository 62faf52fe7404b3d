package grammar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// allocated runs f and returns the bytes it allocated (runtime.MemStats.TotalAlloc: every
// allocation counts, however short-lived, so this bounds the peak too).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestGBNFBombsRefusedBeforeBuilding: nested {m,n} counts multiply, so a few dozen bytes of GBNF
// ask for billions of nodes. The size is estimated from the parse and refused with an error
// naming the repetition and the limit, having allocated next to nothing. Before, the builder
// expanded every repetition and looked at its budget only after a whole rule: gigabytes.
func TestGBNFBombsRefusedBeforeBuilding(t *testing.T) {
	e := env(t, "qwen3")
	bombs := []string{
		`root ::= (("a"{1000}){1000}){1000}`,
		`root ::= x{1000}` + "\n" + `x ::= ("ab"{1000}){1000}`,
		`root ::= ([a-z]{0,1000}){1000}`,
		`root ::= (("a" | "b" | "c"){1000} "x"){1000} "y"{1000}`,
		`root ::= ("a"{1000}){1000} | ("b"{1000}){1000} | ("c"{1000}){1000}`,
	}
	for _, src := range bombs {
		var err error
		n := allocated(func() { _, err = e.comp.GBNF(src) })
		var ge *Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), "node limit") {
			t.Errorf("%q: err %v, want a *Error naming the node limit", src, err)
		}
		if n > 16<<20 {
			t.Errorf("%q: allocated %d MB before refusing", src, n>>20)
		}
		t.Logf("%q: %v (allocated %d KB)", src, err, n>>10)
	}
}

// TestBuildStopsAtBudget: where the estimate lets a grammar through, the builder still stops
// allocating at its node budget, not at the end of a rule.
func TestBuildStopsAtBudget(t *testing.T) {
	e := env(t, "qwen3")
	small := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxStates: 50000}})
	b := small.newBuilder(context.Background())
	b.g.rules = []int32{-1}
	n := allocated(func() {
		for i := 0; i < 10_000_000 && !b.over; i++ {
			b.lit("abcdefgh")
		}
		for i := 0; i < 1_000_000; i++ { // a caller that does not look at b.over yet
			b.lit("abcdefgh")
		}
	})
	if !b.over || len(b.g.nodes) > 50001 {
		t.Fatalf("over %v with %d nodes, want the budget of 50000 to stop it", b.over, len(b.g.nodes))
	}
	if n > 32<<20 {
		t.Errorf("allocated %d MB for a 50000-node budget", n>>20)
	}
}

// pollContext is a context that ends at its ends-th look at Err, whatever the clock says: a
// compile's stops are tested at chosen points, not at whatever a 5 ms timer on a busy machine
// happens to reach (where the timer fired late, the compile finished first).
type pollContext struct {
	context.Context
	ends  int64         // the look at Err that first sees the context ended; 0: never
	looks atomic.Int64  // how many times Err was called
	done  chan struct{} // closed when the context ends
	once  sync.Once
}

func newPollContext(ends int64) *pollContext {
	return &pollContext{Context: context.Background(), ends: ends, done: make(chan struct{})}
}

func (c *pollContext) Done() <-chan struct{} { return c.done }

func (c *pollContext) Err() error {
	if n := c.looks.Add(1); c.ends == 0 || n < c.ends {
		return nil
	}
	c.once.Do(func() { close(c.done) })
	return context.DeadlineExceeded
}

// TestAbandonedCompileStops: a compile whose context ends while it builds stops its work
// (CompileWait returns having allocated far less than the whole compile) and is not cached.
func TestAbandonedCompileStops(t *testing.T) {
	e := env(t, "qwen3")
	src := `root ::= ("abcdefghij"{100}){300}` // about 400k nodes: allowed, but slow to build
	counting := newPollContext(0)
	whole := allocated(func() {
		if _, err := NewCompiler(e.tok, []int32{e.eos}, Options{}).CompileWait(counting, Spec{Kind: KindGBNF, Text: src}); err != nil {
			t.Fatalf("whole compile: %v", err)
		}
	})
	if looks := counting.looks.Load(); looks < 20 {
		t.Fatalf("the whole compile looked at its context %d times; want one per %d nodes", looks, ctxPoll)
	}
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	var err error
	part := allocated(func() {
		_, err = c.CompileWait(newPollContext(10), Spec{Kind: KindGBNF, Text: src})
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
	t.Logf("stopped having allocated %d KB (the whole compile: %d KB)", part>>10, whole>>10)
	if part > whole/4 {
		t.Errorf("an abandoned compile allocated %d KB, the whole one %d KB: it did not stop", part>>10, whole>>10)
	}
	c.mu.Lock()
	cachedN := len(c.cache)
	c.mu.Unlock()
	if cachedN != 0 {
		t.Errorf("a stopped compile was cached")
	}
}

// TestAbandonedAfterBuilding: a context that ends once the automaton is built stops the compile
// before its DFA, the other half of the work (on a machine where the builder outran a 5 ms
// timer, the whole grammar was finished for a caller that had gone).
func TestAbandonedAfterBuilding(t *testing.T) {
	e := env(t, "qwen3")
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	b := c.newBuilder(ctx)
	b.g.rules = []int32{-1}
	root, err := c.buildGBNF(b, `root ::= ("abcdefghij"{100}){30}`)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cancel()
	g, err := c.finish(b, b.call(root))
	if !errors.Is(err, context.Canceled) || g != nil {
		t.Fatalf("finish after the context ended: grammar %v, err %v; want no grammar and the context's error", g != nil, err)
	}
}

// maskBomb is a GBNF grammar of n rules `rK ::= "K" .+ | .+` under one alternation: after any
// first byte thousands of alternatives are active at once.
func maskBomb(n int) string {
	var sb strings.Builder
	sb.WriteString("root ::= ")
	for i := range n {
		if i > 0 {
			sb.WriteString(" | ")
		}
		fmt.Fprintf(&sb, "r%d", i)
	}
	sb.WriteString("\n")
	for i := range n {
		fmt.Fprintf(&sb, "r%d ::= .+\n", i)
	}
	return sb.String()
}

// TestMaskBombRefusedAtCompile: a grammar whose masks would cost seconds each (30,000 `.+`
// alternatives: each step closes 30,000 configurations, and a mask steps once per trie node)
// is refused when compiled, naming why, rather than stalling the rank's steps. Before, it
// compiled, and each mask took about 4 s.
func TestMaskBombRefusedAtCompile(t *testing.T) {
	e := env(t, "qwen3")
	for _, n := range []int{5000, 30000} {
		c := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxGBNFBytes: 1 << 20}}) // past the byte limit
		start := time.Now()
		_, err := c.GBNF(maskBomb(n))
		var ge *Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), "alternatives active at once") {
			t.Fatalf("%d rules: err %v, want a *Error naming the alternatives", n, err)
		}
		t.Logf("%d rules: refused in %v: %v", n, time.Since(start), err)
	}
	// a grammar of fewer alternatives compiles, its masks within bounds
	g, err := e.comp.GBNF(maskBomb(50))
	if err != nil {
		t.Fatal(err)
	}
	if !acceptDoc(t, e, g, "hello world") {
		t.Error("50 alternatives: text refused")
	}
}

// TestFillMaskWithinStopsAtDeadline: a mask that is not done by its deadline is given up with
// ErrMaskDeadline (the grammar's lock released at once), and a later call with time enough
// computes it.
func TestFillMaskWithinStopsAtDeadline(t *testing.T) {
	e := env(t, "qwen3")
	// behind a prefix longer than what the compile explores, 60 alternatives compile
	prefix := strings.Repeat("z", probeStates+16)
	g, err := e.comp.GBNF(strings.Replace(maskBomb(60), "root ::= ", `root ::= "`+prefix+`" alts`+"\nalts ::= ", 1))
	if err != nil {
		t.Fatal(err)
	}
	m := g.NewMatcher()
	if !m.AcceptBytes([]byte(prefix + "x")) {
		t.Fatal("prefix refused")
	}
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	start := time.Now()
	err = m.FillMaskWithin(mask, time.Now().Add(time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, ErrMaskDeadline) {
		t.Fatalf("err %v, want ErrMaskDeadline (took %v)", err, took)
	}
	t.Logf("given up after %v", took)
	if took > 2*time.Second {
		t.Errorf("a 1 ms deadline took %v to stop", took)
	}
	if err := m.FillMaskWithin(mask, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// the same mask from a grammar whose computations were never given up
	src := strings.Replace(maskBomb(60), "root ::= ", `root ::= "`+prefix+`" alts`+"\nalts ::= ", 1)
	g2, err := NewCompiler(e.tok, []int32{e.eos}, Options{}).GBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	m2 := g2.NewMatcher()
	m2.AcceptBytes([]byte(prefix + "x"))
	ref := make([]uint64, len(mask))
	m2.FillMask(ref)
	for i := range ref {
		if ref[i] != mask[i] {
			t.Fatalf("mask word %d after a given-up computation: %x, the plain walk %x", i, mask[i], ref[i])
		}
	}
}

// TestMaskBombRefusedBeforeBuilding: a grammar with a point where thousands of alternatives are
// active at once is refused from its parse, naming where and the limit, before its automaton is
// built: the refusal of 30,000 `.+` rules allocates tens of megabytes (its parse), not the
// hundreds its automaton and start state took, and takes a fraction of a second. The behind-a-
// prefix variant used to compile (the probe of the first DFA states did not reach it) and the
// others were refused only after the build. TotalAlloc counts every allocation, however short-
// lived, so it bounds the peak of the heap during the compile too.
func TestMaskBombRefusedBeforeBuilding(t *testing.T) {
	e := env(t, "qwen3")
	var opt strings.Builder
	opt.WriteString("root ::=")
	for i := range 5000 {
		fmt.Fprintf(&opt, ` "%d"?`, i)
	}
	bombs := []struct {
		name, src string
		maxMB     uint64
	}{
		{"30000 rules", maskBomb(30000), 64},
		{"5000 rules behind a prefix", strings.Replace(maskBomb(5000), "root ::= ", `root ::= "`+strings.Repeat("z", 2*probeStates)+`" alts`+"\nalts ::= ", 1), 16},
		{"a repeated alternation", `root ::= (.+ | "a" | "b" | "c" | "d"){0,1000} "e"`, 4},
		{"5000 optional items", opt.String(), 16},
	}
	for _, b := range bombs {
		c := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxGBNFBytes: 1 << 20}}) // past the byte limit
		var err error
		start := time.Now()
		n := allocated(func() { _, err = c.GBNF(b.src) })
		took := time.Since(start)
		var ge *Error
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), "alternatives active at once") || !strings.Contains(err.Error(), "line 1 column") {
			t.Errorf("%s: err %v, want a *Error naming where the alternatives are active", b.name, err)
		}
		if n > b.maxMB<<20 {
			t.Errorf("%s: allocated %d MB before refusing (at most %d MB)", b.name, n>>20, b.maxMB)
		}
		t.Logf("%s (%d bytes): refused in %v having allocated %d KB: %v", b.name, len(b.src), took.Round(time.Millisecond), n>>10, err)
	}
}

// gbnfWidest is the estimate checkWidth compares to maxStateConfigs, for src.
func gbnfWidest(t *testing.T, src string) int64 {
	t.Helper()
	rules, err := parseGBNF(src)
	if err != nil {
		t.Fatal(err)
	}
	gc := &gbnfCompiler{}
	if err := gc.analyze(rules); err != nil {
		t.Fatal(err)
	}
	_, n := gc.widest()
	return n
}

// TestWidthEstimateIsLowerBound: checkWidth's estimate never exceeds the widest DFA state of the
// grammar (so it refuses only what the DFA would find too wide), and meets it on grammars whose
// wide point is not followed by more text in a caller.
func TestWidthEstimateIsLowerBound(t *testing.T) {
	e := env(t, "qwen3")
	cases := []struct {
		src   string
		exact bool // the estimate is the widest state
	}{
		{`root ::= "a" | "b" | [c-d]+ | .`, true},
		{"root ::= x? y? \"z\"\nx ::= \"x\"+\ny ::= \"q\" | \"r\"", true},
		{`root ::= ("a"? "b"?){3} "c"`, true},
		{`root ::= "p" ("a" | "b" | "c"){0,4} "q"`, true},
		{"root ::= item (\",\" item)*\nitem ::= [0-9]+ | \"null\" | \"[\" root? \"]\"", true},
		{`root ::= "(" root ")" | "x" | "y"`, true},
		{"root ::= a | b | c\na ::= \"k\" .+\nb ::= \"k\" [a-z]*\nc ::= \"k\"? \"m\"{0,5}", true},
		{`root ::= [a-c]{0,20}`, true},
		{"root ::= x \"c\"? \"d\"?\nx ::= \"q\" \"e\"?", false}, // after q: e, then c and d in root
	}
	for _, tc := range cases {
		est := gbnfWidest(t, tc.src)
		g, err := e.comp.GBNF(tc.src)
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		// the widest of the DFA states reachable from the start (all of them: these are small)
		g.mu.Lock()
		widest := 0
		seen := map[int32]bool{g.start: true}
		for queue := []int32{g.start}; len(queue) > 0 && len(seen) < 2000; {
			s := queue[0]
			queue = queue[1:]
			widest = max(widest, len(g.states[s].cfg))
			for c := range 256 {
				if g.states[s].next[c>>6]&(1<<(uint(c)&63)) == 0 {
					continue
				}
				if n := g.step(s, byte(c)); n > 0 && !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
		g.mu.Unlock()
		if est > int64(widest) || est < 1 || tc.exact && est != int64(widest) {
			t.Errorf("%q: estimate %d, widest DFA state %d configurations", tc.src, est, widest)
		}
		t.Logf("%q: estimate %d, widest DFA state %d", tc.src, est, widest)
	}
}

// TestGBNFAnalysisIsLinear: which rules may match no text is found in one pass over the
// grammar. Before, a fixpoint walked every rule again until nothing changed: a chain of 20,000
// rules, each nullable only once the next one is known to be, took 19 s to compile (10,000 took
// 4 s), and a megabyte of them minutes. The nullability found is checked against the automaton's (the empty text is
// accepted exactly when root is nullable), on grammars where it comes from afar.
func TestGBNFAnalysisIsLinear(t *testing.T) {
	e := env(t, "qwen3")
	chain := func(n int, last string) string {
		var sb strings.Builder
		sb.WriteString("root ::= r1 \"x\"?\n")
		for i := 1; i < n; i++ {
			fmt.Fprintf(&sb, "r%d ::= r%d\n", i, i+1)
		}
		fmt.Fprintf(&sb, "r%d ::= %s\n", n, last)
		return sb.String()
	}
	start := time.Now()
	g, err := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxGBNFBytes: 1 << 20}}).GBNF(chain(20000, `""`)) // 338 KB
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a chain of 20,000 rules compiled in %v", took)
	if took > 10*time.Second {
		t.Errorf("a chain of 20,000 rules took %v to compile", took)
	}
	_ = g // its calls nest deeper than the DFA follows (maxStackDepth): its language is checked short
	cases := []string{
		chain(50, `""`),
		chain(50, `"z"`),
		chain(50, `"z"?`),
		"root ::= a \"x\"?\na ::= b | \"\"\nb ::= \"y\" a",
		"root ::= b\nb ::= a\na ::= c | \"q\"\nc ::= \"\"",
		"root ::= (a b)*  \"\"\na ::= \"k\"+\nb ::= a",
		"root ::= a{2,3}\na ::= (b | \"x\") b?\nb ::= [a-z]{0,4}",
		"root ::= ()",
		"root ::= a\na ::= b c\nb ::= \"\"\nc ::= \"e\"{0}",
	}
	for _, src := range cases {
		g, err := e.comp.GBNF(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		rules, err := parseGBNF(src)
		if err != nil {
			t.Fatal(err)
		}
		gc := &gbnfCompiler{}
		if err := gc.analyze(rules); err != nil {
			t.Fatal(err)
		}
		if gc.nullable[gc.root] != acceptBytes(g, "") {
			t.Errorf("%q: root nullable %v, the automaton accepts the empty text %v", src, gc.nullable[gc.root], acceptBytes(g, ""))
		}
	}
}

// TestCachedRefusalsHoldLittle: refusals are cached like grammars (an equal request is answered
// at once), but a long grammar's entry holds a digest of its text, not the text: 100 refused
// grammars of half a megabyte each keep well under a megabyte alive. Before, the cache kept each
// text whole as its key, and refusals count for no bytes of grammar: 256 refused 700 KB grammars
// held 180 MB of a worker.
func TestCachedRefusalsHoldLittle(t *testing.T) {
	e := env(t, "qwen3")
	c := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxGBNFBytes: 1 << 20}}) // past the byte limit
	pad := "# " + strings.Repeat("p", 512<<10) + "\n"
	live := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := live()
	for i := range 100 {
		src := fmt.Sprintf("%sroot ::= ((\"a\"{1000}){1000}){1000} # %d\n", pad, i)
		if _, err := c.GBNF(src); err == nil || !strings.Contains(err.Error(), "node limit") {
			t.Fatalf("bomb %d: %v", i, err)
		}
	}
	held := int64(live()) - int64(before)
	c.mu.Lock()
	n := len(c.cache)
	c.mu.Unlock()
	t.Logf("%d refusals cached, holding %d KB", n, held>>10)
	if n != 100 {
		t.Errorf("%d refusals cached, want 100", n)
	}
	if held > 4<<20 {
		t.Errorf("100 cached refusals hold %d MB", held>>20)
	}
	// the same text again is the cached refusal
	src := fmt.Sprintf("%sroot ::= ((\"a\"{1000}){1000}){1000} # %d\n", pad, 7)
	if _, err := c.GBNF(src); err == nil {
		t.Error("a cached refusal compiled")
	}
	runtime.KeepAlive(c)
}

// TestGBNFByteLimit: a GBNF text over Limits.MaxGBNFBytes is refused before it is parsed, naming
// its size, the limit and the flag that sets it, whether it is a request's grammar or a part of a
// composed one, and at a cost that does not grow with its rules: the 30,000-rule bomb (698 KB)
// parsed and analyzed for tens of milliseconds of CPU and tens of megabytes before its width was
// refused. A grammar at the limit compiles.
func TestGBNFByteLimit(t *testing.T) {
	e := env(t, "qwen3")
	bomb := maskBomb(30000)
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	var err error
	n := allocated(func() { _, err = c.GBNF(bomb) })
	var ge *Error
	want := fmt.Sprintf("GBNF grammar is %d bytes, over the %d-byte limit (--grammar-max-gbnf-bytes)", len(bomb), DefaultMaxGBNFBytes)
	if !errors.As(err, &ge) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want a *Error saying %q", err, want)
	}
	if n > 64<<10 {
		t.Errorf("allocated %d KB refusing a text by its length", n>>10)
	}
	part, _ := json.Marshal(map[string]any{"seq": []any{map[string]any{"lit": "x"}, map[string]any{"gbnf": bomb}}})
	if _, err := c.Compose(string(part)); !errors.As(err, &ge) || !strings.Contains(err.Error(), "--grammar-max-gbnf-bytes") {
		t.Errorf("composed: err %v, want the GBNF byte limit named", err)
	}
	// exactly at a small limit: compiles; one byte over: refused
	small := NewCompiler(e.tok, []int32{e.eos}, Options{Limits: Limits{MaxGBNFBytes: 64}})
	at := `root ::= "ab" [0-9]+` + "\n" + strings.Repeat("#", 64-len(`root ::= "ab" [0-9]+`+"\n"))
	if _, err := small.GBNF(at); err != nil {
		t.Errorf("%d bytes at a 64-byte limit: %v", len(at), err)
	}
	if _, err := small.GBNF(at + "#"); !errors.As(err, &ge) || !strings.Contains(err.Error(), "65 bytes, over the 64-byte limit") {
		t.Errorf("65 bytes at a 64-byte limit: %v", err)
	}
}
