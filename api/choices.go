package api

// Requests with several choices: a batch of prompts on /v1/completions, n > 1 and best_of. Each
// choice is its own engine request (its own seed stream and, under a constraint, its own
// matcher); the response numbers them as OpenAI does (prompt p's choice j is index p*n + j),
// streams each chunk with its choice's index, and sums usage. The n candidates of one prompt
// share its KV: the first is dispatched alone, and the others, once it has produced a token (its
// prompt is in the rank's prefix cache), follow it to the same rank and reuse those blocks.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// MaxChoices bounds n, best_of and the prompts of one batch, and their product.
const MaxChoices = 128

// checkBatch refuses a batch larger than MaxChoices.
func (s *Server) checkBatch(n int) error {
	if n > MaxChoices {
		return badRequest("prompt", fmt.Sprintf("a batch holds at most %d prompts, got %d", MaxChoices, n))
	}
	return nil
}

// batchPrompts refuses a batch larger than MaxChoices, then reads each of its items into a
// prompt with read, which names item i field[i] in its errors.
func batchPrompts[T any](s *Server, items []T, field string, read func(T, string) ([]int32, error)) ([][]int32, error) {
	if err := s.checkBatch(len(items)); err != nil {
		return nil, err
	}
	out := make([][]int32, len(items))
	for i, it := range items {
		var err error
		if out[i], err = read(it, fmt.Sprintf("%s[%d]", field, i)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RankFinder is an optional Engine capability: the data-parallel rank a live request was
// dispatched to, so a request's siblings can follow it there and reuse its prompt's KV.
type RankFinder interface {
	RankOf(rid string) (rank int, ok bool)
}

// usageTotals sums the latest counts of every choice of a response.
type usageTotals struct {
	mu     sync.Mutex // guards counts: choices stream concurrently
	counts []Delta    // per choice: its latest prompt, cached and completion counts
	per    int        // candidates per prompt: the first of each group counts its prompt
}

func (u *usageTotals) update(i int, d *Delta) {
	u.mu.Lock()
	u.counts[i].mergeMeta(d)
	u.mu.Unlock()
}

// sum is the response's usage: every prompt once (its first candidate's counts) and every
// candidate's completion tokens.
func (u *usageTotals) sum() Delta {
	u.mu.Lock()
	defer u.mu.Unlock()
	var t Delta
	for i, c := range u.counts {
		if i%u.per == 0 {
			t.PromptTokens += c.PromptTokens
			t.CachedTokens += c.CachedTokens
		}
		t.CompletionTokens += c.CompletionTokens
	}
	return t
}

// choiceSet is a response with several choices: one request and one format per candidate, in
// choice order (prompt p's candidates at p*per .. p*per+per-1).
type choiceSet struct {
	*openAIFormat // the response's head (id, object, stream options)
	reqs          []*Request
	formats       []*openAIFormat
	// native, when set, makes the choices /generate objects (a batch): one per candidate, the
	// response a JSON array of them; the OpenAI head and formats are then unused.
	native []*nativeFormat
	per    int // candidates per prompt: best_of, else n
	n      int // choices returned per prompt
	totals *usageTotals
}

// expandChoices turns a validated template request (prompts[0] in it) and its format into a
// choice set: per prompt, max(n, best_of) candidates, the j-th seeded seed+j when a seed is set.
func (s *Server) expandChoices(tmpl *Request, f *openAIFormat, prompts [][]int32, nField, bestOfField, truncate, maxTokens *int) (*Request, outputFormat, error) {
	n, per := 1, 1
	if nField != nil {
		n = *nField
	}
	per = n
	if bestOfField != nil {
		if *bestOfField < n || *bestOfField > MaxChoices {
			return nil, nil, badRequest("best_of", fmt.Sprintf("must be in [n, %d] (n = %d), got %d", MaxChoices, n, *bestOfField))
		}
		per = *bestOfField
		if per > n && tmpl.Stream {
			return nil, nil, badRequest("best_of", "cannot be streamed when best_of > n: the best choices are known only at the end")
		}
	}
	if len(prompts)*per > MaxChoices {
		return nil, nil, badRequest("n", fmt.Sprintf("%d prompts x %d choices exceeds %d", len(prompts), per, MaxChoices))
	}
	cs := &choiceSet{openAIFormat: f, per: per, n: n,
		totals: &usageTotals{counts: make([]Delta, len(prompts)*per), per: per}}
	for p, ids := range prompts {
		base := *tmpl
		if p > 0 {
			var err error
			if base.InputIDs, err = s.truncatePrompt(ids, truncate); err != nil {
				return nil, nil, err
			}
			if err := s.checkLength(&base, maxTokens, "max_tokens", 16); err != nil {
				return nil, nil, badRequest(fmt.Sprintf("prompt[%d]", p), err.Error())
			}
		}
		for j := range per {
			r := base
			r.RID = s.engine.NewRID()
			if p == 0 && j == 0 {
				r.RID = tmpl.RID // the response id names the first request
			}
			if tmpl.Sampling.Seed != nil {
				seed := *tmpl.Sampling.Seed + uint64(j)
				r.Sampling.Seed = &seed
			}
			if per > n {
				r.Logprobs = true // best_of ranks candidates by their cumulative logprob
			}
			rf := *f
			rf.index, rf.totals, rf.chunkHead, rf.includeUsage, rf.rtok = len(cs.reqs), cs.totals, nil, false, nil
			if rf.out != nil {
				rf.out = rf.out.fresh() // each choice parses its own output
			}
			if f.echo != nil {
				rf.echo = f.echo.forPrompt(s, base.InputIDs)
			}
			cs.reqs = append(cs.reqs, &r)
			cs.formats = append(cs.formats, &rf)
		}
	}
	return cs.reqs[0], cs, nil
}

// choiceEvent is one candidate's delta.
type choiceEvent struct {
	i  int
	d  Delta
	st *Stream // the choice's stream, for its times
}

// choiceRun is one choice set in flight: the goroutines that submit and read its candidates,
// and the aborts that end them.
//
// Goroutines, all started by serveChoices' goroutine (the HTTP handler's) and joined (wg) before
// serveChoices returns; it cancels ctx first, which ends each of them:
//   - one pump per submitted candidate (pump): reads the candidate's Stream and forwards each
//     delta to events, until the candidate finishes or ctx ends.
//   - one sibling submitter per prompt when per > 1 (siblings): waits until the prompt's first
//     candidate has a token (its prompt's KV is computed and cached), then submits the other
//     candidates to the same rank and starts their pumps.
//   - the AfterFuncs on the client's context and on the server's stop call abortAll; they are
//     stopped (or have run) before serveChoices returns.
//
// The handler's goroutine submits each prompt's first candidate, consumes events and writes the
// response. Locks: mu guards submitted, which the handler, the submitters and abortAll touch.
type choiceRun struct {
	s        *Server
	cs       *choiceSet
	ctx      context.Context
	events   chan choiceEvent // every candidate's deltas, buffered for one per candidate
	interval int              // ids per delta a pump waits for after the first (stream interval)
	wg       sync.WaitGroup   // the pumps and submitters

	mu        sync.Mutex
	submitted []string // the Stream RIDs of the candidates submitted so far
}

// add records a submitted candidate's stream, so abortAll reaches it.
func (c *choiceRun) add(st *Stream) {
	c.mu.Lock()
	c.submitted = append(c.submitted, st.RID)
	c.mu.Unlock()
}

// abortAll aborts every candidate submitted so far.
func (c *choiceRun) abortAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rid := range c.submitted {
		c.s.engine.Abort(rid)
	}
}

// pump starts the goroutine that forwards candidate i's deltas; first, when set, is closed at
// its first delta.
func (c *choiceRun) pump(i int, st *Stream, first chan<- struct{}) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		want := 1
		for {
			d, err := st.Next(c.ctx, want)
			if err != nil {
				return
			}
			want = c.interval
			if first != nil {
				close(first)
				first = nil
			}
			select {
			case c.events <- choiceEvent{i, d, st}:
			case <-c.ctx.Done():
				return
			}
			if d.Finished {
				return
			}
		}
	}()
}

// siblings starts the goroutine that submits candidates g+1 .. g+per-1 once first is closed, to
// rank (-1: any) unless a candidate is pinned, and starts their pumps.
func (c *choiceRun) siblings(g, rank int, first <-chan struct{}) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-first: // the prompt's KV is computed: the siblings reuse it
		case <-c.ctx.Done():
			return
		}
		for i := g + 1; i < g+c.cs.per && c.ctx.Err() == nil; i++ {
			req := c.cs.reqs[i]
			if req.RoutedRank < 0 {
				req.RoutedRank = rank
			}
			st, err := c.s.engine.Submit(c.ctx, req)
			if err != nil {
				select {
				case c.events <- choiceEvent{i, Delta{Finished: true, FinishReason: FinishError, Err: fmt.Errorf("submit choice %d: %w", i, err)}, nil}:
				case <-c.ctx.Done():
				}
				continue
			}
			c.add(st)
			if c.ctx.Err() != nil {
				c.s.engine.Abort(st.RID) // the client left while it was being sent
				return
			}
			c.pump(i, st, nil)
		}
	}()
}

// serveChoices runs every candidate of cs and answers with one response object or one stream.
func (s *Server) serveChoices(w http.ResponseWriter, r *http.Request, cs *choiceSet, start time.Time) {
	// As in serve: no read deadline once the body is in, and none taken after Stop.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if s.stopping.Err() != nil {
		s.fail(w, errShuttingDown)
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	run := &choiceRun{s: s, cs: cs, ctx: ctx, events: make(chan choiceEvent, len(cs.reqs)),
		interval: max(cs.reqs[0].StreamInterval, 1)}
	defer func() {
		cancel(nil)
		run.wg.Wait()
	}()
	done := make([]bool, len(cs.reqs))
	if !cs.reqs[0].Stream {
		run.interval = 1 << 30
	}
	// The first candidate of every prompt goes out now: a refusal is the response.
	firsts := make([]*Stream, 0, len(cs.reqs)/cs.per)
	for g := 0; g < len(cs.reqs); g += cs.per {
		st, err := s.engine.Submit(ctx, cs.reqs[g])
		if err != nil {
			run.abortAll()
			s.fail(w, err)
			return
		}
		run.add(st)
		firsts = append(firsts, st)
	}
	stop := context.AfterFunc(r.Context(), func() { s.met.disconnects.Inc(); run.abortAll() })
	defer stop()
	// Stop ends the request here (a 503, or a stream's error event and [DONE]) and the
	// candidates at the ranks.
	stopped := context.AfterFunc(s.stopping, func() { cancel(errShuttingDown); run.abortAll() })
	defer stopped()
	for gi, st := range firsts {
		g := gi * cs.per
		first := make(chan struct{})
		run.pump(g, st, first)
		if cs.per == 1 {
			continue
		}
		rank := -1
		if rf, ok := s.engine.(RankFinder); ok {
			if rk, ok := rf.RankOf(st.RID); ok {
				rank = rk
			}
		}
		run.siblings(g, rank, first)
	}
	events, abortAll := run.events, run.abortAll
	if cs.reqs[0].Stream {
		s.streamChoices(ctx, w, cs, events, done, start)
		if slices.Contains(done, false) && r.Context().Err() == nil {
			// The client stopped reading and a write timed out: end the candidates.
			s.met.disconnects.Inc()
			abortAll()
		}
		return
	}
	all := make([]Delta, len(cs.reqs))
	for left := len(cs.reqs); left > 0; {
		var ev choiceEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
			if context.Cause(ctx) == errShuttingDown {
				s.writeError(w, http.StatusServiceUnavailable, errShuttingDown)
			}
			return // or the client is gone: the AfterFunc aborted the candidates
		}
		all[ev.i].Merge(&ev.d)
		if ev.d.Finished {
			left--
			s.met.finished(&all[ev.i], ev.st, start)
			cs.totals.update(ev.i, &all[ev.i])
			if err := all[ev.i].Err; err != nil {
				abortAll()
				s.failOutput(w, err, fmt.Sprintf("choice %d failed after %d tokens", ev.i, len(all[ev.i].IDs)))
				return
			}
		}
	}
	if cs.native != nil {
		dst := []byte{'['}
		for i := range all {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = cs.native[i].object(dst, &all[i])
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(dst, "]\n"...))
		return
	}
	order := cs.ranked(all)
	dst := cs.head(nil, false)
	dst = append(dst, `,"choices":[`...)
	for k, i := range order {
		if k > 0 {
			dst = append(dst, ',')
		}
		f := cs.formats[i]
		f.index = k
		dst = f.choice(dst, &all[i], false, false)
	}
	dst = append(dst, `],"usage":`...)
	u := cs.totals.sum()
	dst = cs.usage(dst, &u)
	w.Header().Set("Content-Type", "application/json")
	_ = http.NewResponseController(w).SetWriteDeadline(s.writeDeadline())
	_, _ = w.Write(append(dst, "}\n"...))
}

// ranked lists the candidates returned, in choice order: all of them, or with best_of each
// prompt's n with the highest cumulative logprob (ties to the earlier candidate).
func (cs *choiceSet) ranked(all []Delta) []int {
	var out []int
	for g := 0; g < len(all); g += cs.per {
		idx := make([]int, cs.per)
		for j := range idx {
			idx[j] = g + j
		}
		if cs.per > cs.n {
			score := func(i int) float64 {
				var sum float64
				for _, lp := range all[i].Logprobs {
					sum += float64(lp)
				}
				return sum
			}
			slices.SortStableFunc(idx, func(a, b int) int {
				sa, sb := score(a), score(b)
				switch {
				case sa > sb:
					return -1
				case sa < sb:
					return 1
				}
				return 0
			})
		}
		out = append(out, idx[:cs.n]...)
	}
	return out
}

// streamChoices writes the candidates' deltas as they come, each chunk one choice with its
// index, then the summed usage (include_usage) and [DONE].
func (s *Server) streamChoices(ctx context.Context, w http.ResponseWriter, cs *choiceSet, events <-chan choiceEvent, done []bool, start time.Time) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(s.writeDeadline())
	w.WriteHeader(http.StatusOK)
	started := make([]bool, len(cs.reqs))
	totals := make([]Delta, len(cs.reqs))
	var buf []byte
	for left := len(cs.reqs); left > 0; {
		var ev choiceEvent
		select {
		case ev = <-events:
		case <-ctx.Done():
			if context.Cause(ctx) == errShuttingDown {
				_ = rc.SetWriteDeadline(s.writeDeadline())
				_, _ = w.Write(append(appendErrorEvent(buf[:0], errShuttingDown), "data: [DONE]\n\n"...))
				_ = rc.Flush()
			}
			return
		}
		totals[ev.i].mergeMeta(&ev.d)
		cs.totals.update(ev.i, &ev.d)
		if cs.native != nil {
			buf = cs.native[ev.i].chunk(buf[:0], &ev.d, !started[ev.i])
		} else {
			buf = cs.formats[ev.i].chunk(buf[:0], &ev.d, !started[ev.i])
		}
		started[ev.i] = true
		if ev.d.Finished {
			left--
			done[ev.i] = true
			s.met.finished(&totals[ev.i], ev.st, start)
		}
		if left == 0 {
			if cs.native == nil && cs.includeUsage {
				buf = append(buf, "data: "...)
				buf = cs.appendChunkHead(buf)
				buf = append(buf, `,"choices":[],"usage":`...)
				u := cs.totals.sum()
				buf = cs.usage(buf, &u)
				buf = append(buf, "}\n\n"...)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
		}
		_ = rc.SetWriteDeadline(s.writeDeadline()) // a client that stops reading is cut
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// nativePrompts reads /generate's prompt: text (a string, or a list: a batch) or input_ids (ids,
// or a list of id lists: a batch).
func (s *Server) nativePrompts(body *generateRequest) ([][]int32, bool, error) {
	hasText := len(body.Text) > 0 && string(body.Text) != "null"
	hasIDs := len(body.InputIDs) > 0 && string(body.InputIDs) != "null"
	switch {
	case hasText && hasIDs:
		return nil, false, badRequest("text", "give either text or input_ids, not both")
	case hasText:
		var text string
		if err := json.Unmarshal(body.Text, &text); err == nil {
			ids, err := s.encode(text, "text")
			return [][]int32{ids}, false, err
		}
		var texts []string
		if json.Unmarshal(body.Text, &texts) != nil || len(texts) == 0 {
			return nil, false, badRequest("text", "must be a string or a non-empty list of strings")
		}
		out, err := batchPrompts(s, texts, "text", s.encode)
		if err != nil {
			return nil, false, err
		}
		return out, true, nil
	case hasIDs:
		raw := bytes.TrimSpace(body.InputIDs)
		if len(raw) > 1 && raw[0] == '[' {
			if rest := bytes.TrimSpace(raw[1:]); len(rest) > 0 && rest[0] == '[' {
				// A batch: each list is read by the bounded id reader.
				var lists []json.RawMessage
				if json.Unmarshal(raw, &lists) != nil || len(lists) == 0 {
					return nil, false, badRequest("input_ids", "must be a list of token ids or a non-empty list of such lists")
				}
				out, err := batchPrompts(s, lists, "input_ids", s.promptIDs)
				if err != nil {
					return nil, false, err
				}
				return out, true, nil
			}
		}
		ids, err := s.promptIDs(raw, "input_ids")
		return [][]int32{ids}, false, err
	}
	return nil, false, badRequest("text", "one of text or input_ids is required")
}

// expandNative turns a validated /generate template (prompts[0] in it) into a batch: n requests
// and objects per prompt (choice j seeded seed+j), each object carrying its index p*n + j.
func (s *Server) expandNative(tmpl *Request, nf *nativeFormat, prompts [][]int32, n int, maxNew *int) (*Request, outputFormat, error) {
	if len(prompts)*n > MaxChoices {
		return nil, nil, badRequest("sampling_params.n", fmt.Sprintf("%d prompts x n=%d exceeds %d", len(prompts), n, MaxChoices))
	}
	cs := &choiceSet{per: n, n: n, totals: &usageTotals{counts: make([]Delta, len(prompts)*n), per: n}}
	for p, ids := range prompts {
		base := *tmpl
		if p > 0 {
			base.InputIDs = ids
			if err := s.checkLength(&base, maxNew, "max_new_tokens", s.cfg.DefaultMaxNewTokens); err != nil {
				return nil, nil, badRequest(fmt.Sprintf("input_ids[%d]", p), err.Error())
			}
		}
		for j := range n {
			r := base
			if p > 0 || j > 0 {
				r.RID = s.engine.NewRID()
			}
			if tmpl.Sampling.Seed != nil {
				seed := *tmpl.Sampling.Seed + uint64(j)
				r.Sampling.Seed = &seed
			}
			f := *nf
			f.rid, f.index = r.RID, len(cs.reqs)
			if f.inputFrom >= 0 {
				if f.inputFrom >= len(r.InputIDs) {
					return nil, nil, badRequest("logprob_start_len", fmt.Sprintf("prompt %d has only %d tokens", p, len(r.InputIDs)))
				}
				f.inputIDs = r.InputIDs
			}
			cs.reqs = append(cs.reqs, &r)
			cs.native = append(cs.native, &f)
		}
	}
	return cs.reqs[0], cs, nil
}
