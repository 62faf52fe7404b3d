package scheduler

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkStep measures the scheduler's own cost per generated token in steady state: n
// requests decoding on the token-replay runner (no model math), each finishing after 128 tokens
// and replaced at once by a new one with a 32-token prompt, so every step also carries a few
// prefills, finishes and admissions. Sampling is greedy, so each token also pays one argmax
// over the vocabulary.
func BenchmarkStep(b *testing.B) {
	for _, c := range []struct{ running, vocab int }{{256, 1024}, {4096, 1024}, {256, 32000}} {
		b.Run(fmt.Sprintf("running=%d/vocab=%d", c.running, c.vocab), func(b *testing.B) {
			const bs, promptLen, gen = 16, 32, 128
			n := c.running
			blocks := n*((promptLen+gen)/bs+1) + 64
			s := newScheduler(b, newReplay(b, c.vocab, blocks, bs), Config{MaxRunning: n, MaxPrefillTokens: n + 512, ChunkSize: 512, MaxModelLen: 1024})
			// Requests are recycled once finished, so the loop measures the scheduler, not the
			// caller's allocations.
			reqs := make(map[string]*Request, 2*n)
			for i := range 2 * n {
				r := &Request{RID: rid(i), InputIDs: prompt(i, promptLen, c.vocab), MaxNewTokens: gen, Sampling: greedy()}
				reqs[r.RID] = r
				if i < n {
					mustAdd(b, s, r)
				}
			}
			spare := make([]*Request, 0, 2*n)
			for i := n; i < 2*n; i++ {
				spare = append(spare, reqs[rid(i)])
			}
			tokens := 0
			step := func() {
				out, err := s.Step(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				for i := range out.Items {
					it := &out.Items[i]
					tokens += len(it.NewIDs)
					if it.Finished {
						mustAdd(b, s, spare[0])
						spare = append(spare[1:], reqs[it.RID])
					}
				}
			}
			// Warm up past the first wave of prefills into a steady mix of finishes.
			for range gen + gen/2 {
				step()
			}
			tokens = 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
			b.ReportMetric(float64(tokens)/float64(b.N), "tokens/step")
		})
	}
}
