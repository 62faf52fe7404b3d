package scheduler

// specCounts is one request's speculative verifications, reported on its finish item.
type specCounts struct {
	// drafts counts the verifications, draftTokens the draft tokens they verified.
	drafts, draftTokens int
	// accepted[j] counts the verifications whose draft token j was accepted.
	accepted []int
}

// fill copies c into a finish item (a copy of accepted: the item outlives the request).
func (c *specCounts) fill(it *Item) {
	it.SpecDrafts, it.SpecDraftTokens = c.drafts, c.draftTokens
	it.SpecAccepted = nil
	if len(c.accepted) > 0 {
		it.SpecAccepted = append([]int(nil), c.accepted...)
	}
}

// countDrafts records a verification of n draft tokens of which the first matched were
// accepted: in the rank's Stats and in st's own counts. A verification that finished st built
// its finish item before it was counted, so the item is filled again.
func (s *Scheduler) countDrafts(st *liveRequest, it *Item, n, matched int) {
	if n == 0 {
		return
	}
	s.stats.Drafts++
	c := &st.specCount
	c.drafts++
	c.draftTokens += n
	for len(c.accepted) < matched {
		c.accepted = append(c.accepted, 0)
	}
	for j := range matched {
		c.accepted[j]++
	}
	if it.Finished {
		c.fill(it)
	}
}
