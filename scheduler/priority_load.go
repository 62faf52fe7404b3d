package scheduler

import "slices"

// waitingByPriority counts the waiting requests per priority value: the MaxPriorityGauges
// lowest values exactly, the rest summed. The queue is in priority order only under
// PolicyPriority, so the values are sorted first (O(n log n) in the queue, no map).
func (s *Scheduler) waitingByPriority() ([]PriorityCount, int) {
	ps := s.priorities[:0]
	for _, st := range s.waiting {
		ps = append(ps, st.req.Priority)
	}
	slices.Sort(ps)
	s.priorities = ps
	var out []PriorityCount
	other := 0
	for i, p := range ps {
		switch {
		case i > 0 && p == ps[i-1] && len(out) > 0 && out[len(out)-1].Priority == p:
			out[len(out)-1].Count++
		case len(out) < MaxPriorityGauges:
			out = append(out, PriorityCount{Priority: p, Count: 1})
		default:
			other++
		}
	}
	return out, other
}
