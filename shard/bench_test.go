package shard

import (
	"testing"
)

// BenchmarkPick measures one dispatch over 8 ranks, with a load report
// every 64 picks as on a busy worker.
func BenchmarkPick(b *testing.B) {
	for _, m := range []Method{RoundRobin, ShortestQueue, MinimumTokens} {
		b.Run(m.String(), func(b *testing.B) {
			d, err := NewDispatcher(8, m, 1, WithWorkers(4))
			if err != nil {
				b.Fatal(err)
			}
			var seq uint64
			for i := 0; b.Loop(); i++ {
				r, err := d.Pick(100+i%900, -1)
				if err != nil {
					b.Fatal(err)
				}
				if i%64 == 0 {
					seq++
					s := d.Snapshot().Ranks[r]
					if _, err := d.Report(r, Load{Seq: seq, Running: int(s.Sent / 2), KVTokensUsed: int64(s.Sent) * 500,
						KVTokensCapacity: 1 << 20, Received: s.Sent, ReceivedTokens: s.Sent * 500}); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
