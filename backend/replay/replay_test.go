package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/backend"
)

func newRunner(t testing.TB, opts Options) *Runner {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// argmax returns the index of the largest entry and how many entries are nonzero.
func argmax(row []float32) (int32, int) {
	best, nonzero := int32(0), 0
	for i, v := range row {
		if v != 0 {
			nonzero++
		}
		if v > row[best] {
			best = int32(i)
		}
	}
	return best, nonzero
}

// TestChunkedPrefillThenDecodeMatchesContinuation runs two sequences through the runner the way
// a scheduler would (prefill in chunks over scattered blocks, then one token per step) and checks
// the greedy tokens against Continuation, with every row one-hot.
func TestChunkedPrefillThenDecodeMatchesContinuation(t *testing.T) {
	const vocab, bs = 300, 4
	r := newRunner(t, Options{VocabSize: vocab, NumBlocks: 32, BlockSize: bs})
	prompts := [][]int32{{5, 9, 200, 1, 7, 7, 42, 3, 0, 299, 11}, {17}}
	tables := [][]int32{{31, 2, 17, 4, 8, 9, 10, 11}, {0, 30, 29, 28, 27, 26}}
	const gen = 14
	seqs := make([][]int32, len(prompts))
	pos := make([]int, len(prompts))
	for i, p := range prompts {
		seqs[i] = slices.Clone(p)
	}
	for step := 0; ; step++ {
		var b backend.Batch
		var idx []int
		for i := range seqs {
			if len(seqs[i])-len(prompts[i]) == gen {
				continue
			}
			n := min(len(seqs[i])-pos[i], 3) // chunks of at most 3 tokens
			b.Seqs = append(b.Seqs, backend.Seq{Tokens: seqs[i][pos[i] : pos[i]+n], Pos: pos[i], BlockTable: tables[i],
				Logits: pos[i]+n == len(seqs[i])})
			idx = append(idx, i)
		}
		if len(idx) == 0 {
			break
		}
		rows, err := r.Forward(context.Background(), &b)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if len(rows) != len(b.Seqs) {
			t.Fatalf("step %d: %d rows for %d seqs", step, len(rows), len(b.Seqs))
		}
		for k, i := range idx {
			pos[i] += len(b.Seqs[k].Tokens)
			if !b.Seqs[k].Logits {
				if rows[k] != nil {
					t.Fatalf("step %d: row for a seq without Logits", step)
				}
				if r.Argmax(k) != -1 {
					t.Fatalf("step %d: device argmax %d for a seq without Logits", step, r.Argmax(k))
				}
				continue
			}
			if len(rows[k]) != vocab {
				t.Fatalf("step %d: row of %d floats, want %d", step, len(rows[k]), vocab)
			}
			tok, nonzero := argmax(rows[k])
			if nonzero != 1 || rows[k][tok] != WinnerLogit {
				t.Fatalf("step %d: row has %d nonzero entries, winner %v; want one-hot", step, nonzero, rows[k][tok])
			}
			if d := r.Argmax(k); d != tok {
				t.Fatalf("step %d: device argmax %d, row's argmax %d", step, d, tok)
			}
			seqs[i] = append(seqs[i], tok)
		}
	}
	for i, p := range prompts {
		if want := Continuation(vocab, p, gen); !slices.Equal(seqs[i][len(p):], want) {
			t.Errorf("seq %d generated %v, want %v", i, seqs[i][len(p):], want)
		}
	}
	if st := r.Stats(); st.Rows != 2*gen || st.Forwards == 0 {
		t.Errorf("stats %+v: want %d rows", st, 2*gen)
	}
}

// TestWrongBlockTableChangesOutput shows that the runner really reads the context back through
// the block table: decoding with a table that points at another sequence's blocks gives tokens
// other than the continuation (or fails on an unwritten slot).
func TestWrongBlockTableChangesOutput(t *testing.T) {
	const vocab, bs = 1000, 4
	r := newRunner(t, Options{VocabSize: vocab, NumBlocks: 16, BlockSize: bs})
	ctx := context.Background()
	a := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	bPrompt := []int32{11, 12, 13, 14, 15, 16, 17, 18, 19}
	if _, err := r.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
		{Tokens: a, BlockTable: []int32{0, 1, 2}},
		{Tokens: bPrompt, BlockTable: []int32{3, 4, 5}},
	}}); err != nil {
		t.Fatal(err)
	}
	// Decode a's last token again at position 8 but with b's first blocks in the table.
	rows, err := r.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{
		{Tokens: a[8:], Pos: 8, BlockTable: []int32{0, 1, 2}, Logits: true},
		{Tokens: a[8:], Pos: 8, BlockTable: []int32{3, 4, 6}, Logits: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	right, _ := argmax(rows[0])
	wrong, _ := argmax(rows[1])
	if want := Continuation(vocab, a, 1)[0]; right != want {
		t.Fatalf("correct table gave %d, want %d", right, want)
	}
	if wrong == right {
		t.Fatalf("a block table into another sequence's KV gave the same token %d", wrong)
	}
}

func TestForwardRejectsBadBatches(t *testing.T) {
	r := newRunner(t, Options{VocabSize: 50, NumBlocks: 4, BlockSize: 4})
	ctx := context.Background()
	cases := []struct {
		name string
		seq  backend.Seq
		want string
	}{
		{"empty", backend.Seq{BlockTable: []int32{0}}, "no tokens"},
		{"negative pos", backend.Seq{Tokens: []int32{1}, Pos: -1, BlockTable: []int32{0}}, "negative position"},
		{"token outside vocab", backend.Seq{Tokens: []int32{50}, BlockTable: []int32{0}}, "outside the vocabulary"},
		{"negative token", backend.Seq{Tokens: []int32{-3}, BlockTable: []int32{0}}, "outside the vocabulary"},
		{"short table", backend.Seq{Tokens: []int32{1, 2, 3, 4, 5}, BlockTable: []int32{0}}, "need 2"},
		{"block out of range", backend.Seq{Tokens: []int32{1}, BlockTable: []int32{4}}, "outside the pool"},
		{"negative block", backend.Seq{Tokens: []int32{1}, BlockTable: []int32{-1}}, "outside the pool"},
		{"unwritten context", backend.Seq{Tokens: []int32{1}, Pos: 6, BlockTable: []int32{2, 3}, Logits: true}, "never written"},
	}
	for _, c := range cases {
		// A valid sequence first: the bad one must not let it write anything.
		good := backend.Seq{Tokens: []int32{7, 8}, BlockTable: []int32{1}}
		_, err := r.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{good, c.seq}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
	for i, v := range r.kv {
		if v != unwritten {
			t.Fatalf("slot %d written (%d) by batches that failed", i, v)
		}
	}
	if _, err := r.Forward(ctx, nil); err == nil {
		t.Error("nil batch accepted")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Forward(cancelled, &backend.Batch{}); err == nil {
		t.Error("cancelled context accepted")
	}
	r.Close()
	if _, err := r.Forward(ctx, &backend.Batch{}); err == nil {
		t.Error("Forward after Close succeeded")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{VocabSize: 0, NumBlocks: 1, BlockSize: 1},
		{VocabSize: 1, NumBlocks: 0, BlockSize: 1},
		{VocabSize: 1, NumBlocks: 1, BlockSize: 0},
		{VocabSize: 1, NumBlocks: 1 << 30, BlockSize: 16},
		{VocabSize: 1, NumBlocks: 1, BlockSize: 1, StepTime: -time.Second},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

func TestStepTimeIsALowerBound(t *testing.T) {
	for _, busy := range []bool{false, true} {
		r := newRunner(t, Options{VocabSize: 8, NumBlocks: 1, BlockSize: 1, StepTime: 3 * time.Millisecond, BusyWait: busy})
		start := time.Now()
		if _, err := r.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{0}, Logits: true}}}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 3*time.Millisecond {
			t.Errorf("busy=%v: step took %v, want >= 3ms", busy, d)
		}
	}
}

func TestContinuationStaysInVocab(t *testing.T) {
	for _, vocab := range []int{1, 2, 7, 151936} {
		for _, tok := range Continuation(vocab, []int32{0}, 200) {
			if tok < 0 || int(tok) >= vocab {
				t.Fatalf("vocab %d: token %d", vocab, tok)
			}
		}
	}
	if Continuation(10, nil, 3) != nil {
		t.Error("continuation of an empty prompt")
	}
}

// BenchmarkForwardDecode measures one decode step of many sequences: the runner's own cost per
// sequence, which the serving benchmarks must keep small next to the pipeline they measure.
func BenchmarkForwardDecode(b *testing.B) {
	for _, n := range []int{256, 4096} {
		b.Run(fmt.Sprintf("seqs=%d", n), func(b *testing.B) {
			const bs = 16
			r := newRunner(b, Options{VocabSize: 8192, NumBlocks: n * 4, BlockSize: bs})
			batch := &backend.Batch{Seqs: make([]backend.Seq, n)}
			for i := range batch.Seqs {
				table := []int32{int32(4 * i), int32(4*i + 1), int32(4*i + 2), int32(4*i + 3)}
				prompt := make([]int32, 40)
				batch.Seqs[i] = backend.Seq{Tokens: prompt, BlockTable: table}
			}
			if _, err := r.Forward(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			for i := range batch.Seqs {
				batch.Seqs[i] = backend.Seq{Tokens: []int32{int32(i)}, Pos: 40, BlockTable: batch.Seqs[i].BlockTable, Logits: true}
			}
			// The first decode allocates the rows, which later steps reuse.
			if _, err := r.Forward(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Forward(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/seq")
		})
	}
}
