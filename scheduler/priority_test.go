package scheduler

import (
	"context"
	"slices"
	"testing"

	"github.com/llmserve/llmserve/backend/replay"
)

// runAll steps s until every request finished, returning the RIDs in the order of their first
// token and of their finish, after checking each one's ids against the replay model.
func runAll(t *testing.T, s *Scheduler, vocab int, reqs []*Request, during func(step int)) (first, finished []string) {
	t.Helper()
	results := map[string]*result{}
	for step := 0; s.HasWork(); step++ {
		if step > 2000 {
			t.Fatalf("no progress: %+v", s.Load())
		}
		if during != nil {
			during(step)
		}
		out, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range out.Items {
			if r := results[it.RID]; (r == nil || len(r.ids) == 0) && len(it.NewIDs) > 0 {
				first = append(first, it.RID)
			}
			if it.Finished {
				finished = append(finished, it.RID)
			}
		}
		collect(t, out, results)
	}
	for _, r := range reqs {
		wantIDs(t, r.RID, results[r.RID].ids, replay.Continuation(vocab, r.InputIDs, r.MaxNewTokens))
	}
	checkDrained(t, s)
	return first, finished
}

// TestPriorityOrdersTheQueue: one slot; under PolicyPriority the lowest priority value runs
// first and equal ones in the order of Add; under PolicyFCFS (and the default) arrival order.
func TestPriorityOrdersTheQueue(t *testing.T) {
	const vocab = 500
	prios := []int{5, 1, 1, 0, -2}
	for _, c := range []struct {
		policy string
		want   []string
	}{
		{PolicyPriority, []string{"r4", "r3", "r1", "r2", "r0"}},
		{PolicyFCFS, []string{"r0", "r1", "r2", "r3", "r4"}},
		{"", []string{"r0", "r1", "r2", "r3", "r4"}},
	} {
		s := newScheduler(t, newReplay(t, vocab, 64, 4), Config{MaxRunning: 1, MaxPrefillTokens: 64, Policy: c.policy})
		var reqs []*Request
		for i, p := range prios {
			r := &Request{RID: rid(i), InputIDs: prompt(i, 6, vocab), MaxNewTokens: 3, Sampling: greedy(), Priority: p}
			reqs = append(reqs, r)
			mustAdd(t, s, r)
		}
		first, _ := runAll(t, s, vocab, reqs, nil)
		if !slices.Equal(first, c.want) {
			t.Errorf("policy %q: served %v, want %v", c.policy, first, c.want)
		}
		if s.Stats().Preemptions != 0 {
			t.Errorf("policy %q: %d preemptions with a free pool", c.policy, s.Stats().Preemptions)
		}
	}
}

// TestPriorityPreemptsWorseRequests: the KV pool holds one long request. A better-priority
// request arriving while a worse one runs preempts it and finishes first; the preempted one
// resumes and still produces exactly its continuation. Under FCFS, and between equal
// priorities, the newcomer waits and nothing is preempted.
func TestPriorityPreemptsWorseRequests(t *testing.T) {
	const vocab, bs = 500, 4
	for _, c := range []struct {
		policy             string
		lowPrio, highPrio  int
		wantFirst          string
		wantPreemptionsMin int
	}{
		{PolicyPriority, 10, 0, "late", 1},
		{PolicyPriority, 3, 3, "early", 0},
		{PolicyFCFS, 10, 0, "early", 0},
	} {
		// 10 blocks of 4: 40 positions, what each request needs (20 + 20): the late one finds
		// no blocks while the early one runs
		s := newScheduler(t, newReplay(t, vocab, 10, bs), Config{MaxRunning: 4, MaxPrefillTokens: 64, Policy: c.policy})
		early := &Request{RID: "early", InputIDs: prompt(1, 20, vocab), MaxNewTokens: 20, Sampling: greedy(), Priority: c.lowPrio}
		late := &Request{RID: "late", InputIDs: prompt(2, 20, vocab), MaxNewTokens: 20, Sampling: greedy(), Priority: c.highPrio}
		mustAdd(t, s, early)
		_, finished := runAll(t, s, vocab, []*Request{early, late}, func(step int) {
			if step == 3 {
				mustAdd(t, s, late)
			}
		})
		p := s.Stats().Preemptions
		if finished[0] != c.wantFirst || p < c.wantPreemptionsMin || (c.wantPreemptionsMin == 0 && p != 0) {
			t.Errorf("policy %q, priorities %d then %d: finished %v with %d preemptions", c.policy, c.lowPrio, c.highPrio, finished, p)
		}
	}
}

// TestUnknownPolicyRefused: New names a policy it does not know.
func TestUnknownPolicyRefused(t *testing.T) {
	if _, err := New(newReplay(t, 100, 8, 4), Config{MaxRunning: 1, MaxPrefillTokens: 8, MaxModelLen: 64, Policy: "lifo"}); err == nil {
		t.Fatal("policy lifo accepted")
	}
}
