package detok

import (
	"github.com/llmserve/llmserve/ipc"
)

// Coalescer gathers several ranks' token batches into one list of items in which each
// request's items are merged in order into one: ids and logprobs appended, the latest counts
// and the finish carried (the streaming promise that a consumer that falls behind gets bigger
// chunks, never fewer tokens). detokd uses it for the frames already queued when it gets to
// them, before detokenizing: when the ranks run ahead, a request costs one table lookup, one
// decode call and one item to its worker per round instead of one of each per step, and the
// text is what the steps would have given one by one (Stream's text is the same however its
// ids are split). Each rank's latest load (in arrival order) replaces its earlier ones.
//
// Everything it holds is its own copy (strings aside, which are immutable), so the decode
// buffers a batch's items point into may be reused at once. Storage is kept between rounds:
// a steady stream allocates nothing.
type Coalescer struct {
	items []ipc.TokenItem // the merged items, in order of each request's first item
	loads []ipc.RankLoad  // each rank's latest load, in order of each rank's first report
	// at maps a rid to its item's position in items (cleared by Reset).
	at map[string]int
	// cursor is where in items Add looks first for the next item's request: a rank lists its
	// requests in the same order step after step, so most items are found there or a few
	// places on, comparing rids instead of hashing them into at.
	cursor int
	// merged counts the items merged into an earlier item of the same request since Reset.
	merged int
	// added counts the items added since Reset (merged or not).
	added int
}

// NewCoalescer returns an empty coalescer.
func NewCoalescer() *Coalescer {
	return &Coalescer{at: make(map[string]int)}
}

// Add merges one rank's batch (its items and its load) into the coalescer. The batch may be
// reused as soon as Add returns.
func (c *Coalescer) Add(b *ipc.TokenBatch) {
	c.addLoad(&ipc.RankLoad{Rank: b.Rank, Seq: b.Seq, Load: b.Load})
	c.cursor = 0
	for i := range b.Items {
		c.addItem(&b.Items[i])
	}
}

// addLoad keeps rl as its rank's load, replacing an earlier one (a later report supersedes it;
// arrival order, not Seq, decides, as a restarted rank starts its Seq over).
func (c *Coalescer) addLoad(rl *ipc.RankLoad) {
	k := 0
	for k < len(c.loads) && c.loads[k].Rank != rl.Rank {
		k++
	}
	if k == len(c.loads) {
		c.loads = grow(c.loads)
	}
	dst := &c.loads[k]
	// The load's slices belong to the caller's decode buffers: copy them into dst's own.
	recv, recvTok, prio := dst.Load.Received[:0], dst.Load.ReceivedTokens[:0], dst.Load.WaitingByPriority[:0]
	dst.Rank, dst.Seq, dst.Load = rl.Rank, rl.Seq, rl.Load
	dst.Load.Received = append(recv, rl.Load.Received...)
	dst.Load.ReceivedTokens = append(recvTok, rl.Load.ReceivedTokens...)
	dst.Load.WaitingByPriority = append(prio, rl.Load.WaitingByPriority...)
}

// addItem appends it, or merges it into the request's earlier item.
func (c *Coalescer) addItem(it *ipc.TokenItem) {
	c.added++
	for k := c.cursor; k < len(c.items) && k < c.cursor+lookAheadSpan; k++ {
		if dst := &c.items[k]; dst.RID == it.RID && !dst.Finished {
			// The request's open item (at[rid] is k: an item is only added under a rid whose
			// earlier item finished, and a finished item is never merged into).
			mergeItem(dst, it)
			c.merged++
			c.cursor = k + 1
			return
		}
	}
	if k, ok := c.at[it.RID]; ok && !c.items[k].Finished {
		mergeItem(&c.items[k], it)
		c.merged++
		c.cursor = k + 1
		return
	}
	// A request's items after its finish (none are sent) are kept apart, as they came.
	c.at[it.RID] = len(c.items)
	c.items = grow(c.items)
	dst := &c.items[len(c.items)-1]
	ids, lps, topIDs, topLps := dst.NewIDs[:0], dst.Logprobs[:0], dst.TopLogprobIDs[:0], dst.TopLogprobs[:0]
	pl, ptIDs, ptLps, emb, stops := dst.PromptLogprobs[:0], dst.PromptTopLogprobIDs[:0], dst.PromptTopLogprobs[:0], dst.Embedding[:0], dst.StopStrings[:0]
	spec := dst.SpecAccepted[:0]
	*dst = *it
	dst.NewIDs = append(ids, it.NewIDs...)
	dst.Logprobs = append(lps, it.Logprobs...)
	dst.TopLogprobIDs = append(topIDs, it.TopLogprobIDs...)
	dst.TopLogprobs = append(topLps, it.TopLogprobs...)
	dst.PromptLogprobs = append(pl, it.PromptLogprobs...)
	dst.PromptTopLogprobIDs = append(ptIDs, it.PromptTopLogprobIDs...)
	dst.PromptTopLogprobs = append(ptLps, it.PromptTopLogprobs...)
	dst.Embedding = append(emb, it.Embedding...)
	dst.StopStrings = append(stops, it.StopStrings...)
	dst.SpecAccepted = append(spec, it.SpecAccepted...)
}

// lookAheadSpan is how many items past its cursor the coalescer compares before it looks a rid
// up: the requests that finished between two steps, which left the batch, are skipped over.
const lookAheadSpan = 8

// mergeItem appends the later item it onto dst, an earlier item of the same request.
func mergeItem(dst, it *ipc.TokenItem) {
	dst.NewIDs = append(dst.NewIDs, it.NewIDs...)
	dst.Logprobs = append(dst.Logprobs, it.Logprobs...)
	dst.TopLogprobIDs = append(dst.TopLogprobIDs, it.TopLogprobIDs...)
	dst.TopLogprobs = append(dst.TopLogprobs, it.TopLogprobs...)
	// Counts: the completion count is cumulative (the worker checks it against the ids it
	// delivered); prompt and cached counts are carried when reported.
	dst.CompletionTokens = it.CompletionTokens
	if it.PromptTokens > 0 {
		dst.PromptTokens = it.PromptTokens
	}
	if it.CachedTokens > 0 {
		dst.CachedTokens = it.CachedTokens
	}
	// What rides on a request's first item only is kept from it, or taken from the later
	// item when the first lacked it.
	if len(dst.PromptLogprobs) == 0 && len(dst.PromptTopLogprobIDs) == 0 {
		dst.PromptLogprobs = append(dst.PromptLogprobs, it.PromptLogprobs...)
		dst.PromptTopLogprobIDs = append(dst.PromptTopLogprobIDs, it.PromptTopLogprobIDs...)
		dst.PromptTopLogprobs = append(dst.PromptTopLogprobs, it.PromptTopLogprobs...)
	}
	if dst.RequestID == "" {
		dst.RequestID = it.RequestID
	}
	if len(dst.StopStrings) == 0 {
		dst.StopStrings = append(dst.StopStrings, it.StopStrings...)
	}
	dst.SkipSpecialTokens = dst.SkipSpecialTokens || it.SkipSpecialTokens
	dst.NoText = dst.NoText && it.NoText
	// The finish (and an error) is the later item's.
	if it.Finished || it.FinishReason != ipc.FinishNone || it.Error != "" {
		dst.Finished, dst.FinishReason, dst.Error, dst.ErrorKind = it.Finished, it.FinishReason, it.Error, it.ErrorKind
		dst.MatchedStop, dst.MatchedStopToken = it.MatchedStop, it.MatchedStopToken
		dst.QueueNanos, dst.PrefillNanos, dst.DecodeNanos, dst.Preemptions = it.QueueNanos, it.PrefillNanos, it.DecodeNanos, it.Preemptions
		dst.SpecDrafts, dst.SpecDraftTokens = it.SpecDrafts, it.SpecDraftTokens
		dst.SpecAccepted = append(dst.SpecAccepted[:0], it.SpecAccepted...)
		dst.Embedding = append(dst.Embedding[:0], it.Embedding...)
	}
}

// Items returns the merged items added since Reset, valid until the next Add or Reset.
func (c *Coalescer) Items() []ipc.TokenItem { return c.items }

// Loads returns each rank's latest load added since Reset, valid until the next Add or Reset.
func (c *Coalescer) Loads() []ipc.RankLoad { return c.loads }

// Len is the number of items added since Reset, merged or not.
func (c *Coalescer) Len() int { return c.added }

// Merged is the number of items merged into an earlier item of the same request since Reset.
func (c *Coalescer) Merged() int { return c.merged }

// Reset empties the coalescer for the next round, keeping its storage.
func (c *Coalescer) Reset() {
	c.items = c.items[:0]
	c.loads = c.loads[:0]
	clear(c.at)
	c.merged, c.added, c.cursor = 0, 0, 0
}

// grow extends s by one element, reusing the element left there by an earlier round (and so
// its slices' storage) when s has room.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero T
	return append(s, zero)
}
