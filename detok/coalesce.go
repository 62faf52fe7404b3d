package detok

import (
	"github.com/llmserve/llmserve/ipc"
)

// Coalescer gathers the per-worker text batches of several Steps into one batch per worker, in
// which each request's items are merged in order into one item: ids, logprobs and text
// appended, the latest counts and the finish carried (the streaming promise that a consumer
// that falls behind gets bigger chunks, never fewer tokens). detokd uses it for the frames
// already queued when it gets to them: when the ranks run ahead, one frame of merged items
// costs the workers one decode and one stream push per request instead of one per step. Each
// rank's latest load (in arrival order) replaces its earlier ones.
//
// Everything it holds is its own copy (strings aside, which are immutable), so the decode
// buffers a Step's items point into may be reused at once. Storage is kept between rounds:
// a steady stream allocates only the text of merged items.
type Coalescer struct {
	out []ipc.TextBatch // per worker: the merged batch being built
	// at maps, per worker, a rid to its item's position in out[w].Items (nil until needed).
	at []map[string]int
	// text holds, per worker and item, the merged text of items that took more than one
	// Step's text (empty otherwise: the item's Text is then its only text).
	text [][][]byte
	// merged counts the items merged into an earlier item of the same request since Reset.
	merged int
	// items counts the items added since Reset (merged or not).
	items int
}

// NewCoalescer returns an empty coalescer for numWorkers tokenizer workers.
func NewCoalescer(numWorkers int) *Coalescer {
	return &Coalescer{out: make([]ipc.TextBatch, numWorkers), at: make([]map[string]int, numWorkers), text: make([][][]byte, numWorkers)}
}

// Add merges one Step's batches (indexed by worker, as Step returns them) into the coalescer.
// The batches may be reused as soon as Add returns.
func (c *Coalescer) Add(batches []ipc.TextBatch) {
	for w := range batches {
		if w >= len(c.out) {
			break
		}
		in := &batches[w]
		out := &c.out[w]
		for i := range in.Loads {
			c.addLoad(out, &in.Loads[i])
		}
		if in.Detok.GoVersion != "" {
			out.Detok = in.Detok
		}
		for i := range in.Items {
			c.addItem(w, &in.Items[i])
		}
	}
}

// addLoad keeps rl as its rank's load, replacing an earlier one (a later report supersedes it;
// arrival order, not Seq, decides, as a restarted rank starts its Seq over).
func (c *Coalescer) addLoad(out *ipc.TextBatch, rl *ipc.RankLoad) {
	k := 0
	for k < len(out.Loads) && out.Loads[k].Rank != rl.Rank {
		k++
	}
	if k == len(out.Loads) {
		out.Loads = grow(out.Loads)
	}
	dst := &out.Loads[k]
	// The load's slices belong to the caller's decode buffers: copy them into dst's own.
	recv, recvTok, prio := dst.Load.Received[:0], dst.Load.ReceivedTokens[:0], dst.Load.WaitingByPriority[:0]
	dst.Rank, dst.Seq, dst.Load = rl.Rank, rl.Seq, rl.Load
	dst.Load.Received = append(recv, rl.Load.Received...)
	dst.Load.ReceivedTokens = append(recvTok, rl.Load.ReceivedTokens...)
	dst.Load.WaitingByPriority = append(prio, rl.Load.WaitingByPriority...)
}

// addItem appends it to worker w's batch, or merges it into the request's earlier item there.
func (c *Coalescer) addItem(w int, it *ipc.TextItem) {
	c.items++
	out := &c.out[w]
	if k, ok := c.at[w][it.RID]; ok && !out.Items[k].Finished {
		c.merge(w, k, it)
		c.merged++
		return
	}
	if c.at[w] == nil {
		c.at[w] = make(map[string]int)
	}
	// A request's items after its finish (none are sent) would be kept apart, as they came.
	c.at[w][it.RID] = len(out.Items)
	out.Items = grow(out.Items)
	dst := &out.Items[len(out.Items)-1]
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
	for len(c.text[w]) < len(out.Items) {
		c.text[w] = append(c.text[w], nil)
	}
	c.text[w][len(out.Items)-1] = c.text[w][len(out.Items)-1][:0]
}

// merge appends the later item it onto worker w's item k of the same request.
func (c *Coalescer) merge(w, k int, it *ipc.TextItem) {
	dst := &c.out[w].Items[k]
	dst.NewIDs = append(dst.NewIDs, it.NewIDs...)
	dst.Logprobs = append(dst.Logprobs, it.Logprobs...)
	dst.TopLogprobIDs = append(dst.TopLogprobIDs, it.TopLogprobIDs...)
	dst.TopLogprobs = append(dst.TopLogprobs, it.TopLogprobs...)
	if it.Text != "" {
		buf := &c.text[w][k]
		if len(*buf) == 0 {
			*buf = append(*buf, dst.Text...)
		}
		*buf = append(*buf, it.Text...)
	}
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

// Len is the number of items added since Reset, merged or not.
func (c *Coalescer) Len() int { return c.items }

// Merged is the number of items merged into an earlier item of the same request since Reset.
func (c *Coalescer) Merged() int { return c.merged }

// Batches returns one batch per worker: what was added since Reset. They are valid until the
// next Add or Reset.
func (c *Coalescer) Batches() []ipc.TextBatch {
	for w := range c.out {
		for k, t := range c.text[w][:len(c.out[w].Items)] {
			if len(t) > 0 {
				c.out[w].Items[k].Text = string(t)
			}
		}
	}
	return c.out
}

// Reset empties the coalescer for the next round, keeping its storage.
func (c *Coalescer) Reset() {
	for w := range c.out {
		c.out[w].Items = c.out[w].Items[:0]
		c.out[w].Loads = c.out[w].Loads[:0]
		c.out[w].Detok = ipc.GoStats{}
		clear(c.at[w])
	}
	c.merged, c.items = 0, 0
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
