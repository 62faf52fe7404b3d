package api

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/llmserve/llmserve/scheduler"
)

// FinishReason says why a request stopped producing tokens: the scheduler's type (the rank
// decides it; the wire carries it as ipc.FinishReason), named here so the API reads as before.
// Its String is the OpenAI name.
type FinishReason = scheduler.FinishReason

// Finish reasons.
const (
	FinishNone   = scheduler.FinishNone
	FinishStop   = scheduler.FinishStop
	FinishLength = scheduler.FinishLength
	FinishAbort  = scheduler.FinishAbort
	FinishError  = scheduler.FinishError
)

// Delta is what is new for one request since its previous delta: token ids, their text and
// logprobs, and, on the last one, how it finished. Deltas merge in order (Merge), so a consumer
// that falls behind receives one bigger delta instead of losing any.
type Delta struct {
	IDs      []int32
	Text     string
	Logprobs []float32
	// TopLogprobIDs and TopLogprobs hold Request.TopLogprobs entries per IDs entry, most likely
	// first (flattened), when the request asked for them.
	TopLogprobIDs []int32
	TopLogprobs   []float32
	// PromptLogprobs (prompt tokens 1.., in order) and their top entries (TopLogprobs per
	// position, flattened) come once, when the request asked for them.
	PromptLogprobs      []float32
	PromptTopLogprobIDs []int32
	PromptTopLogprobs   []float32

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

	// QueueTime, PrefillTime and DecodeTime are the rank's account of a finished request: waiting
	// to be scheduled, scheduled until its first token, first token until the finish.
	QueueTime, PrefillTime, DecodeTime time.Duration
	// Preemptions is how many times the rank evicted the finished request to free KV blocks.
	Preemptions int
	// SpecDrafts, SpecDraftTokens and SpecAccepted are the finished request's speculative
	// verifications, the draft tokens they verified, and the drafts accepted at each draft
	// position (vLLM's spec_decode_* counters, counted at the finish).
	SpecDrafts, SpecDraftTokens int
	SpecAccepted                []int
	// Embedding is an embedding request's pooled final hidden state (not normalized), on its
	// finishing delta.
	Embedding []float32
}

// Merge appends later onto d: ids and logprobs appended, text concatenated, the finish and the
// latest usage counts carried.
func (d *Delta) Merge(later *Delta) {
	d.IDs = append(d.IDs, later.IDs...)
	d.Text += later.Text
	d.Logprobs = append(d.Logprobs, later.Logprobs...)
	d.TopLogprobIDs = append(d.TopLogprobIDs, later.TopLogprobIDs...)
	d.TopLogprobs = append(d.TopLogprobs, later.TopLogprobs...)
	d.mergeMeta(later)
}

// mergeMeta carries later's finish, first error and latest usage counts onto d.
func (d *Delta) mergeMeta(later *Delta) {
	if later.Finished {
		d.Finished = true
		d.FinishReason = later.FinishReason
		d.MatchedStop = later.MatchedStop
	}
	if len(later.PromptLogprobs) > 0 || len(later.PromptTopLogprobIDs) > 0 {
		// Copied: a pushed delta's slices may be reused by its sender.
		d.PromptLogprobs = slices.Clone(later.PromptLogprobs)
		d.PromptTopLogprobIDs = slices.Clone(later.PromptTopLogprobIDs)
		d.PromptTopLogprobs = slices.Clone(later.PromptTopLogprobs)
	}
	if len(later.Embedding) > 0 {
		d.Embedding = slices.Clone(later.Embedding) // copied, as the prompt logprobs
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
	if later.Finished {
		d.QueueTime, d.PrefillTime, d.DecodeTime = later.QueueTime, later.PrefillTime, later.DecodeTime
		d.Preemptions = later.Preemptions
		d.SpecDrafts, d.SpecDraftTokens = later.SpecDrafts, later.SpecDraftTokens
		d.SpecAccepted = slices.Clone(later.SpecAccepted) // copied, as the prompt logprobs
	}
}

// Stream is the output mailbox of one request: the worker's receive loop pushes deltas without
// ever blocking, and the HTTP handler takes everything pending at once. Backpressure therefore
// makes chunks bigger, never lossy. Pending ids, text and logprobs are appended to buffers that
// are handed to the consumer and recycled (Take), so a consumer that falls behind costs time
// linear in what it receives, and a steady stream allocates nothing but its text.
type Stream struct {
	RID string
	// Rank is the data-parallel rank the engine sent the request to (for the access log).
	Rank int
	// access is the access line of the HTTP request this stream serves (nil: none).
	access *accessRecord
	// streamed says the client reads this stream as SSE chunks (set at Submit), so merged
	// outputs are chunks coalesced for a consumer that fell behind.
	streamed bool

	mu       sync.Mutex
	ids      []int32
	text     []byte
	logprobs []float32
	topIDs   []int32   // pending top-logprob ids (Delta.TopLogprobIDs)
	topLps   []float32 // pending top logprobs (Delta.TopLogprobs)
	meta     Delta     // finish, error and usage of what is pending; its slices stay empty
	has      bool      // something is pending that has not been taken
	done     bool      // a finished delta has been pushed
	waiting  bool      // the consumer is parked on notify
	notify   chan struct{}
	// firstToken and finished are when the first token id and the finish reached this stream
	// (zero until then): TTFT and decode time for every request, streamed or not.
	firstToken, finished time.Time
	// merged counts pushes that landed on output not yet taken (merged into one chunk).
	merged int
	// usage is the request's counts so far, whatever was taken: the latest prompt and cached
	// counts reported, and every id pushed as completion tokens (what the client gets), so a
	// request that fails reports what it delivered.
	usage Delta
}

// NewStream returns an empty mailbox for rid.
func NewStream(rid string) *Stream {
	return &Stream{RID: rid, notify: make(chan struct{}, 1)}
}

// Push appends d to what is pending (ids and logprobs appended, text concatenated, finish and
// latest usage carried). It copies d's contents, so the caller may reuse d's slices at once.
// Pushes after the finishing delta are ignored.
func (s *Stream) Push(d *Delta) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	if len(d.IDs) > 0 && s.firstToken.IsZero() {
		s.firstToken = time.Now()
	}
	if s.has {
		s.merged++
	}
	s.ids = append(s.ids, d.IDs...)
	s.text = append(s.text, d.Text...)
	s.logprobs = append(s.logprobs, d.Logprobs...)
	s.topIDs = append(s.topIDs, d.TopLogprobIDs...)
	s.topLps = append(s.topLps, d.TopLogprobs...)
	m := &s.meta
	m.mergeMeta(d)
	s.usage.mergeMeta(&Delta{PromptTokens: d.PromptTokens, CachedTokens: d.CachedTokens})
	s.usage.CompletionTokens += len(d.IDs)
	s.has = true
	if d.Finished || d.Err != nil {
		s.done = true
		s.finished = time.Now()
		m.Finished = true
		if m.FinishReason == FinishNone {
			m.FinishReason = FinishError
		}
		if d.Err != nil {
			// The engine's count may be missing (the worker gave up) or ahead of what arrived:
			// the usage of a failed request is what it delivered.
			m.PromptTokens, m.CachedTokens, m.CompletionTokens = s.usage.PromptTokens, s.usage.CachedTokens, s.usage.CompletionTokens
		}
	}
	wake := s.waiting
	s.waiting = false
	s.mu.Unlock()
	if wake {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// Next waits until at least minIDs new token ids are pending, or the request finished, and then
// takes everything pending as one delta. minIDs <= 1 returns as soon as anything is pending.
// It returns ctx.Err() when ctx ends first; what was pending stays pending.
func (s *Stream) Next(ctx context.Context, minIDs int) (Delta, error) {
	var d Delta
	err := s.Take(ctx, minIDs, &d)
	return d, err
}

// Take is Next into d, recycling d's id and logprob buffers: the stream keeps them for what is
// pushed next, so d's previous contents must not be used after Take is called again with d.
func (s *Stream) Take(ctx context.Context, minIDs int, d *Delta) error {
	for {
		s.mu.Lock()
		if s.has && (s.done || len(s.ids) >= minIDs || (minIDs <= 1 && len(s.text) > 0)) {
			ids, lps, topIDs, topLps := d.IDs[:0], d.Logprobs[:0], d.TopLogprobIDs[:0], d.TopLogprobs[:0]
			*d = s.meta
			d.IDs, s.ids = s.ids, ids
			d.Logprobs, s.logprobs = s.logprobs, lps
			d.TopLogprobIDs, s.topIDs = s.topIDs, topIDs
			d.TopLogprobs, s.topLps = s.topLps, topLps
			if len(s.text) > 0 {
				d.Text = string(s.text)
				s.text = s.text[:0]
			}
			s.meta = Delta{}
			s.has = false
			s.mu.Unlock()
			return nil
		}
		s.waiting = true
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-ctx.Done():
			s.mu.Lock()
			s.waiting = false
			s.mu.Unlock()
			return ctx.Err()
		}
	}
}

// TakeMore appends to d, taken by Take, whatever has been pushed since, without waiting: ids and
// logprobs appended, text concatenated, finish, error and latest counts carried (Delta.Merge).
// It reports whether anything was pending.
func (s *Stream) TakeMore(d *Delta) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.has {
		return false
	}
	d.IDs = append(d.IDs, s.ids...)
	d.Logprobs = append(d.Logprobs, s.logprobs...)
	d.TopLogprobIDs = append(d.TopLogprobIDs, s.topIDs...)
	d.TopLogprobs = append(d.TopLogprobs, s.topLps...)
	if len(s.text) > 0 {
		d.Text += string(s.text)
	}
	d.mergeMeta(&s.meta)
	s.ids, s.logprobs, s.topIDs, s.topLps, s.text = s.ids[:0], s.logprobs[:0], s.topIDs[:0], s.topLps[:0], s.text[:0]
	s.meta = Delta{}
	s.has = false
	return true
}

// Usage returns the request's counts so far: the prompt and cached tokens reported, and the
// ids pushed (delivered, once taken) as completion tokens.
func (s *Stream) Usage() (prompt, cached, completion int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage.PromptTokens, s.usage.CachedTokens, s.usage.CompletionTokens
}

// Done reports whether the finishing delta has been pushed.
func (s *Stream) Done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// Merged is how many outputs were pushed onto output the consumer had not taken yet.
func (s *Stream) Merged() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.merged
}

// Times returns when the first token id and the finish reached the stream (zero when not yet).
func (s *Stream) Times() (firstToken, finished time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.firstToken, s.finished
}
