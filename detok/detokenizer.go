package detok

import (
	"errors"
	"fmt"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// Detokenizer is detokd's step function: token-id batches in, per-worker text batches out. It
// keeps one Stream per live request and frees it when the request finishes. Pure: no sockets.
type Detokenizer struct {
	tok     *tokenizer.Tokenizer // makes each request's incremental decoder
	table   *Table               // live requests' detokenization state
	workers int                  // tokenizer workers; an item's Owner indexes out
	out     []ipc.TextBatch      // per worker, reused between steps
	// last holds the streams of the previous step's items in order, next the current step's
	// (swapped after it): a rank lists its requests in the same order step after step, so most
	// streams are found there, comparing rids, instead of in the table's map.
	last, next []streamRef
	one        [1]ipc.RankLoad // Step's one load, kept here so that Step allocates nothing
}

// NewDetokenizer makes a detokenizer for outputs owned by numWorkers tokenizer workers.
func NewDetokenizer(tok *tokenizer.Tokenizer, numWorkers int) *Detokenizer {
	return &Detokenizer{tok: tok, table: NewTable(), workers: numWorkers, out: make([]ipc.TextBatch, numWorkers)}
}

// Step turns one rank's batch into a text batch for every worker: the items each worker owns,
// and the rank's load for all of them (so loads reach every dispatcher, heartbeats included).
// The returned batches are valid until the next Step.
func (d *Detokenizer) Step(in *ipc.TokenBatch) ([]ipc.TextBatch, error) {
	d.one[0] = ipc.RankLoad{Rank: in.Rank, Seq: in.Seq, Load: in.Load}
	return d.StepMerged(in.Items, d.one[:])
}

// StepMerged is Step for items that may come from several ranks' batches (a Coalescer's, one
// item per request): each worker gets the items it owns and every load in loads. The returned
// batches are valid until the next Step; they point into items and loads.
func (d *Detokenizer) StepMerged(items []ipc.TokenItem, loads []ipc.RankLoad) ([]ipc.TextBatch, error) {
	for w := range d.out {
		d.out[w].Items = d.out[w].Items[:0]
		d.out[w].Loads = append(d.out[w].Loads[:0], loads...)
	}
	var errs []error
	last, next := d.last, d.next[:0]
	j := 0 // where in last the next item's stream is looked for first
	for i := range items {
		it := &items[i]
		if int(it.Owner) >= d.workers {
			errs = append(errs, fmt.Errorf("request %s: owner %d out of range (%d workers)", it.RID, it.Owner, d.workers))
			continue
		}
		text := ""
		out := &d.out[it.Owner]
		if !it.NoText {
			st := findStream(last, &j, it.RID)
			ok := st != nil
			if !ok {
				st, ok = d.table.Get(it.RID)
			}
			if !ok && it.CompletionTokens > int32(len(it.NewIDs)) {
				// Ids went out for this request before, but not through this process (detokd
				// restarted): its decoder state, held-back text and stop strings are gone, so
				// its text cannot go on faithfully. Fail it, counting only what was delivered
				// before; the owner aborts it at the rank.
				out.Items = append(out.Items, lostState(it))
				continue
			}
			if !ok {
				var err error
				if st, err = d.table.Open(it.RID, d.tok.NewDecoder(it.SkipSpecialTokens), it.StopStrings); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			text, _, _ = st.Push(it.NewIDs, it.Finished)
			if !it.Finished {
				next = append(next, streamRef{it.RID, st})
			}
		}
		if it.Finished {
			d.table.Close(it.RID)
		}
		out.Items = append(out.Items, ipc.TextItem{TokenItem: *it, Text: text})
	}
	d.last, d.next = next, last
	return d.out, errors.Join(errs...)
}

// streamRef is one request's open stream, by rid.
type streamRef struct {
	rid string
	st  *Stream
}

// lookAheadStreams is how many entries past its cursor findStream compares.
const lookAheadStreams = 8

// findStream finds rid's open stream among the first lookAheadStreams entries of last from *j
// on and moves *j past it; nil (and *j unchanged) when it is not there.
func findStream(last []streamRef, j *int, rid string) *Stream {
	for k := *j; k < len(last) && k < *j+lookAheadStreams; k++ {
		if r := &last[k]; r.rid == rid && !r.st.closed {
			*j = k + 1
			return r.st
		}
	}
	return nil
}

// ErrLostState is the error of a request whose detokenization state this detokd does not hold
// although earlier output of it went out (a previous detokd process had it).
const ErrLostState = "detokd restarted and lost this request's detokenization state (its text could not continue faithfully)"

// lostState is the failing item that replaces it: no new ids or text, and a completion count of
// what went out before it.
func lostState(it *ipc.TokenItem) ipc.TextItem {
	fail := *it
	fail.CompletionTokens -= int32(len(it.NewIDs))
	fail.NewIDs, fail.Logprobs, fail.TopLogprobIDs, fail.TopLogprobs = nil, nil, nil, nil
	fail.Finished, fail.FinishReason, fail.Error, fail.MatchedStop, fail.MatchedStopToken = true, ipc.FinishError, ErrLostState, "", -1
	return ipc.TextItem{TokenItem: fail}
}
