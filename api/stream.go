package api

import (
	"context"
	"sync"
)

// FinishReason says why a request stopped producing tokens.
type FinishReason string

// Finish reasons, with the OpenAI names.
const (
	FinishNone   FinishReason = ""
	FinishStop   FinishReason = "stop"
	FinishLength FinishReason = "length"
	FinishAbort  FinishReason = "abort"
	FinishError  FinishReason = "error"
)

// Delta is what is new for one request since its previous delta: token ids, their text and
// logprobs, and, on the last one, how it finished. Deltas merge in order (Merge), so a consumer
// that falls behind receives one bigger delta instead of losing any.
type Delta struct {
	IDs      []int32
	Text     string
	Logprobs []float32

	Finished     bool
	FinishReason FinishReason
	// MatchedStop is the stop token id (int32) or stop string that ended the request, if any.
	MatchedStop any
	// Err is set when the request failed; every token produced before the failure is still
	// carried in IDs/Text of this or earlier deltas.
	Err error

	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
}

// Merge appends later onto d: ids and logprobs appended, text concatenated, the finish and the
// latest usage counts carried.
func (d *Delta) Merge(later *Delta) {
	d.IDs = append(d.IDs, later.IDs...)
	d.Text += later.Text
	d.Logprobs = append(d.Logprobs, later.Logprobs...)
	if later.Finished {
		d.Finished = true
		d.FinishReason = later.FinishReason
		d.MatchedStop = later.MatchedStop
	}
	if later.Err != nil && d.Err == nil {
		d.Err = later.Err
	}
	if later.PromptTokens > 0 {
		d.PromptTokens = later.PromptTokens
	}
	if later.CachedTokens > 0 {
		d.CachedTokens = later.CachedTokens
	}
	if later.CompletionTokens > 0 {
		d.CompletionTokens = later.CompletionTokens
	}
}

// Stream is the output mailbox of one request: the worker's receive loop pushes deltas without
// ever blocking, and the HTTP handler takes everything pending at once. Backpressure therefore
// makes chunks bigger, never lossy.
type Stream struct {
	RID string

	mu      sync.Mutex
	pending Delta
	has     bool // pending holds something not yet taken
	done    bool // a finished delta has been pushed
	notify  chan struct{}
}

// NewStream returns an empty mailbox for rid.
func NewStream(rid string) *Stream {
	return &Stream{RID: rid, notify: make(chan struct{}, 1)}
}

// Push merges d into what is pending. Pushes after the finishing delta are ignored.
func (s *Stream) Push(d *Delta) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.pending.Merge(d)
	s.has = true
	if d.Finished || d.Err != nil {
		s.done = true
		s.pending.Finished = true
		if s.pending.FinishReason == FinishNone {
			s.pending.FinishReason = FinishError
		}
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next waits until at least minIDs new token ids are pending, or the request finished, and then
// takes everything pending as one delta. minIDs <= 1 returns as soon as anything is pending.
// It returns ctx.Err() when ctx ends first; what was pending stays pending.
func (s *Stream) Next(ctx context.Context, minIDs int) (Delta, error) {
	for {
		s.mu.Lock()
		if s.has && (s.done || len(s.pending.IDs) >= minIDs || (minIDs <= 1 && s.pending.Text != "")) {
			d := s.pending
			s.pending = Delta{}
			s.has = false
			s.mu.Unlock()
			return d, nil
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Delta{}, ctx.Err()
		}
	}
}

// Done reports whether the finishing delta has been pushed.
func (s *Stream) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}
