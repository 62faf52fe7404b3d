package scheduler

import (
	"reflect"
	"testing"
)

// TestWaitingByPriority: the load counts waiting requests per priority value, lowest first,
// the values after the first MaxPriorityGauges summed, under either policy.
func TestWaitingByPriority(t *testing.T) {
	for _, policy := range []string{PolicyFCFS, PolicyPriority} {
		s := newScheduler(t, newReplay(t, 50, 10, 4), Config{MaxRunning: 1, MaxPrefillTokens: 8, Policy: policy})
		prios := []int{5, -2, 5, 0, 9, 10, 11, 12, 13, 14, 15, 15, -2, 5}
		for i, p := range prios {
			mustAdd(t, s, &Request{RID: string(rune('a' + i)), InputIDs: prompt(i+1, 6, 50), MaxNewTokens: 3, Sampling: greedy(), Priority: p})
		}
		l := s.Load()
		want := []PriorityCount{{-2, 2}, {0, 1}, {5, 3}, {9, 1}, {10, 1}, {11, 1}, {12, 1}, {13, 1}}
		if !reflect.DeepEqual(l.WaitingByPriority, want) || l.WaitingOtherPriority != 3 {
			t.Fatalf("%v: by priority %v other %d, want %v other 3", policy, l.WaitingByPriority, l.WaitingOtherPriority, want)
		}
		total := l.WaitingOtherPriority
		for _, c := range l.WaitingByPriority {
			total += c.Count
		}
		if total != l.Waiting {
			t.Fatalf("%v: per-priority counts sum to %d, waiting %d", policy, total, l.Waiting)
		}
	}
}
