package detok

import (
	"fmt"
	"testing"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// BenchmarkRound4096 is one detokd round at 4,096 decoding streams: 8 steps of one token per
// request merged (Coalescer) and detokenized (StepMerged); ns/op is per round, ns/token is
// per token.
func BenchmarkRound4096(b *testing.B) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		b.Fatal(err)
	}
	const n, steps = 4096, 8
	batch := ipc.TokenBatch{Items: make([]ipc.TokenItem, n)}
	for i := range batch.Items {
		batch.Items[i] = ipc.TokenItem{RID: fmt.Sprintf("w0-%032x", i*7919), NewIDs: []int32{int32(100 + i%50)}, MatchedStopToken: -1}
	}
	d := NewDetokenizer(tok, 1)
	co := NewCoalescer()
	b.ReportAllocs()
	for b.Loop() {
		for range steps {
			for i := range batch.Items {
				batch.Items[i].CompletionTokens++
			}
			co.Add(&batch)
		}
		if _, err := d.StepMerged(co.Items(), co.Loads()); err != nil {
			b.Fatal(err)
		}
		co.Reset()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n*steps), "ns/token")
}
