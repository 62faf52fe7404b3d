package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Violation is one broken promise on one request.
type Violation struct {
	Request int    `json:"request"`
	Kind    string `json:"kind"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string {
	return fmt.Sprintf("request %d: %s: %s", v.Request, v.Kind, v.Detail)
}

// Violation kinds.
const (
	vTransport     = "transport"      // the request failed or the stream broke off
	vHTTPStatus    = "http_status"    // not 200
	vMalformed     = "malformed"      // a payload we could not read
	vErrorEvent    = "error_event"    // the server sent an error event
	vMissingFinish = "missing_finish" // no chunk had a finish_reason
	vFinishTwice   = "finish_repeated"
	vFinishReason  = "finish_reason"  // not "length" although ignore_eos
	vAfterFinish   = "after_finish"   // ids after the finish_reason chunk
	vMissingUsage  = "missing_usage"  // no usage chunk
	vUsageTwice    = "usage_repeated" // more than one usage chunk
	vUsageCount    = "usage_mismatch" // ids received != usage.completion_tokens
	vPromptCount   = "prompt_tokens"  // usage.prompt_tokens != ids sent
	vLength        = "length"         // ids received != max_tokens although ignore_eos
	vMissingDone   = "missing_done"   // no [DONE]
	vAfterDone     = "after_done"     // data after [DONE]
	vSequence      = "sequence"       // an id differs from -expect-sequence (duplicate, gap, cross-talk)
	vDrain         = "not_drained"    // /get_load never showed an idle server
)

// maxKeptViolations bounds the examples kept; all are counted.
const maxKeptViolations = 20

// Summary is the result of a run.
type Summary struct {
	URL         string  `json:"url"`
	Endpoint    string  `json:"endpoint"`
	Model       string  `json:"model"`
	Mode        string  `json:"mode"` // "closed" (fixed concurrency) or "open" (Poisson rate)
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	InputLen    int     `json:"input_len"`
	OutputLen   int     `json:"output_len"`

	Requests     int     `json:"requests"`     // started
	Completed    int     `json:"completed"`    // streamed to the end (not client-closed)
	Disconnected int     `json:"disconnected"` // closed by the client on purpose
	Failed       int     `json:"failed"`       // requests with at least one violation
	WallSeconds  float64 `json:"wall_s"`

	OutputTokens    int64   `json:"output_tokens"` // ids received, all requests
	OutputTokPerSec float64 `json:"output_tok_per_s"`
	RequestsPerSec  float64 `json:"requests_per_s"` // completed per second
	TextBytes       int64   `json:"text_bytes"`

	TTFT Latency `json:"ttft"`
	ITL  Latency `json:"itl"` // per token: chunk gap / ids in the chunk
	E2E  Latency `json:"e2e"`

	ChunksPerRequest float64 `json:"chunks_per_request"` // chunks carrying ids, completed requests
	IDsPerChunk      float64 `json:"ids_per_chunk"`

	Violations      int            `json:"violations"`
	ViolationKinds  map[string]int `json:"violation_kinds,omitempty"`
	FirstViolations []Violation    `json:"first_violations,omitempty"`

	Drain *DrainReport `json:"drain,omitempty"`
}

// OK says whether every request kept every promise.
func (s *Summary) OK() bool { return s.Violations == 0 }

// generator runs requests and gathers their results.
type generator struct {
	cfg    Config
	client *http.Client
	target string // full endpoint URL
	model  string

	ttft, itl, e2e histogram

	started, finished, inFlight atomic.Int64
	tokens, textBytes           atomic.Int64

	mu           sync.Mutex
	completed    int
	disconnected int
	failed       int
	chunks       int64 // id-carrying chunks of completed requests
	chunkIDs     int64
	violations   int
	kinds        map[string]int
	kept         []Violation
}

// newTransport is tuned for thousands of concurrent streams to one host: no connection cap, an
// idle pool as big as the concurrency, no compression, and read buffers big enough that a
// merged chunk is one read.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxConnsPerHost:     0,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		ReadBufferSize:      32 << 10,
		WriteBufferSize:     8 << 10,
	}
}

// run performs the load test cfg describes and returns its summary. The error is for a run that
// could not start (bad config, no model); broken promises are in the summary.
func run(ctx context.Context, cfg Config, progress io.Writer) (Summary, error) {
	if err := cfg.validate(); err != nil {
		return Summary{}, err
	}
	conns := cfg.Concurrency
	if conns == 0 {
		conns = 1024
	}
	tr := newTransport(conns)
	defer tr.CloseIdleConnections()
	g := &generator{cfg: cfg, client: &http.Client{Transport: tr}, kinds: map[string]int{}}
	base := strings.TrimRight(cfg.URL, "/")
	g.target = base + "/v1/completions"
	if cfg.Endpoint == "chat" {
		g.target = base + "/v1/chat/completions"
	}
	g.model = cfg.Model
	if g.model == "" {
		m, err := firstModel(ctx, g.client, base)
		if err != nil {
			return Summary{}, err
		}
		g.model = m
	}

	start := time.Now()
	stopProgress := g.startProgress(progress, start)
	if cfg.Rate > 0 {
		g.openLoop(ctx, start)
	} else {
		g.closedLoop(ctx, start)
	}
	wall := time.Since(start)
	stopProgress()

	sum := g.summary(wall)
	if cfg.CheckDrained {
		d := checkDrained(ctx, g.client, base, cfg.DrainTimeout)
		sum.Drain = &d
		if !d.Drained {
			sum.Violations++
			sum.ViolationKinds[vDrain]++
			sum.FirstViolations = append(sum.FirstViolations, Violation{Request: -1, Kind: vDrain, Detail: d.String()})
		}
	}
	return sum, nil
}

// firstModel asks /v1/models for the served model's name.
func firstModel(ctx context.Context, c *http.Client, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("models request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("get %s/v1/models: %w", base, err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("get %s/v1/models: status %s", base, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("decode %s/v1/models: %w", base, err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("%s/v1/models lists no model; pass -model", base)
	}
	return list.Data[0].ID, nil
}

// closedLoop keeps Concurrency requests open until Requests are done or Duration has passed.
func (g *generator) closedLoop(ctx context.Context, start time.Time) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for k := range g.cfg.Concurrency {
		wg.Go(func() {
			if g.cfg.Ramp > 0 {
				t := time.NewTimer(time.Duration(int64(g.cfg.Ramp) * int64(k) / int64(g.cfg.Concurrency)))
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if g.cfg.Requests > 0 && i >= int64(g.cfg.Requests) {
					return
				}
				if g.cfg.Duration > 0 && time.Since(start) >= g.cfg.Duration {
					return
				}
				g.one(ctx, int(i))
			}
		})
	}
	wg.Wait()
}

// openLoop starts requests at Poisson arrival times, whatever the server's pace, optionally
// capped at Concurrency in flight.
func (g *generator) openLoop(ctx context.Context, start time.Time) {
	rng := rand.New(rand.NewPCG(g.cfg.Seed, math.MaxUint64))
	var sem chan struct{}
	if g.cfg.Concurrency > 0 {
		sem = make(chan struct{}, g.cfg.Concurrency)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	at := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; g.cfg.Requests == 0 || i < g.cfg.Requests; i++ {
		at = at.Add(time.Duration(rng.ExpFloat64() / g.cfg.Rate * float64(time.Second)))
		if g.cfg.Duration > 0 && at.Sub(start) >= g.cfg.Duration {
			return
		}
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		wg.Go(func() {
			g.one(ctx, i)
			if sem != nil {
				<-sem
			}
		})
	}
}

// startProgress prints completed, in flight and tok/s every period until the returned func runs.
func (g *generator) startProgress(w io.Writer, start time.Time) func() {
	if w == nil || g.cfg.Progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(g.cfg.Progress)
		defer t.Stop()
		last, lastAt := int64(0), start
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				tok := g.tokens.Load()
				rate := float64(tok-last) / now.Sub(lastAt).Seconds()
				last, lastAt = tok, now
				fmt.Fprintf(w, "[%6.1fs] completed %d  in flight %d  tokens %d  %.0f tok/s\n",
					now.Sub(start).Seconds(), g.finished.Load(), g.inFlight.Load(), tok, rate)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// plan is one request's random choices, drawn from (Seed, index) so runs are reproducible.
type plan struct {
	body         []byte
	promptKey    int64 // last prompt id (0 for text): the key of a prompt-keyed sequence
	disconnectAt int   // close after this many ids; -1 = never
}

var words = strings.Fields(`the of and to in is that for it as was with be by on not he this are or
his from at which but have an they you were her she there been one all we their has would when
if so no will more about can out up them what some time into only other new could then two may
first any like now my such make over our even most me state after also made many did must before`)

func (g *generator) plan(i int) plan {
	rng := rand.New(rand.NewPCG(g.cfg.Seed, uint64(i)))
	p := plan{disconnectAt: -1}
	if g.cfg.DisconnectFrac > 0 && rng.Float64() < g.cfg.DisconnectFrac {
		p.disconnectAt = rng.IntN(g.cfg.OutputLen)
	}
	b := make([]byte, 0, 256+g.cfg.InputLen*6)
	b = append(b, `{"model":`...)
	b = strconv.AppendQuote(b, g.model)
	var prompt []byte
	if g.cfg.usesText() {
		prompt = append(prompt, '"')
		for k := range g.cfg.InputLen {
			if k > 0 {
				prompt = append(prompt, ' ')
			}
			prompt = append(prompt, words[rng.IntN(len(words))]...)
		}
		prompt = append(prompt, '"')
	} else {
		prompt = append(prompt, '[')
		for k := range g.cfg.InputLen {
			if k > 0 {
				prompt = append(prompt, ',')
			}
			p.promptKey = int64(rng.IntN(g.cfg.Vocab))
			prompt = strconv.AppendInt(prompt, p.promptKey, 10)
		}
		prompt = append(prompt, ']')
	}
	if g.cfg.Endpoint == "chat" {
		b = append(b, `,"messages":[{"role":"user","content":`...)
		b = append(b, prompt...)
		b = append(b, `}]`...)
	} else {
		b = append(b, `,"prompt":`...)
		b = append(b, prompt...)
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(g.cfg.OutputLen), 10)
	b = append(b, `,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"return_token_ids":true`...)
	if g.cfg.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	if g.cfg.StreamInterval > 0 {
		b = append(b, `,"stream_interval":`...)
		b = strconv.AppendInt(b, int64(g.cfg.StreamInterval), 10)
	}
	p.body = append(b, '}')
	return p
}

// streamState is the verifier of one stream, fed chunk by chunk.
type streamState struct {
	ids         int // ids received
	chunks      int // id-carrying chunks
	textBytes   int
	finished    bool
	finish      string // the first finish_reason
	afterFinish int    // ids received after it
	usageSeen   int
	usage       usage
	done        bool
	afterDone   bool
	violations  []Violation
}

func (st *streamState) violate(req int, kind, format string, args ...any) {
	st.violations = append(st.violations, Violation{Request: req, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// one runs request i to the end and records what it saw.
func (g *generator) one(ctx context.Context, i int) {
	g.started.Add(1)
	g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	defer g.finished.Add(1)
	p := g.plan(i)
	st, disconnected := g.stream(ctx, i, &p)
	if !disconnected {
		g.finalChecks(i, &st)
	}
	g.record(&st, disconnected)
}

// stream sends the request and reads its events; disconnected says the client closed it on purpose.
func (g *generator) stream(parent context.Context, i int, p *plan) (st streamState, disconnected bool) {
	ctx, cancel := context.WithTimeout(parent, g.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.target, bytes.NewReader(p.body))
	if err != nil {
		st.violate(i, vTransport, "build request: %v", err)
		return st, false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	sent := time.Now()
	resp, err := g.client.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return st, true
		}
		st.violate(i, vTransport, "post: %v", err)
		return st, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		st.violate(i, vHTTPStatus, "%s: %s", resp.Status, bytes.TrimSpace(b))
		return st, false
	}
	if p.disconnectAt == 0 {
		return st, true
	}
	seq := g.cfg.ExpectSequence
	r := newSSEReader(resp.Body, 8<<10)
	var c chunk
	last := sent
	for {
		payload, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			switch {
			case parent.Err() != nil:
				return st, true // the whole run was stopped: not the server's fault
			case ctx.Err() != nil:
				st.violate(i, vTransport, "request timed out after %s with %d ids", g.cfg.RequestTimeout, st.ids)
			default:
				st.violate(i, vTransport, "read stream after %d ids: %v", st.ids, err)
			}
			break
		}
		if st.done {
			st.afterDone = true
			continue // keep reading to the end so the connection can be reused
		}
		if err := parseChunk(payload, &c); err != nil {
			st.violate(i, vMalformed, "%v", err)
			continue
		}
		switch {
		case c.done:
			st.done = true
			continue
		case c.errMsg != "":
			st.violate(i, vErrorEvent, "%s", c.errMsg)
			continue
		}
		if c.hasUsage {
			st.usageSeen++
			st.usage = c.usage
		}
		if n := len(c.ids); n > 0 {
			now := time.Now()
			if st.ids == 0 {
				g.ttft.add(now.Sub(sent), 1)
			} else {
				g.itl.add(now.Sub(last)/time.Duration(n), uint64(n))
			}
			last = now
			if st.finished && st.afterFinish == 0 {
				st.violate(i, vAfterFinish, "ids after finish_reason %q (first %d of them at id #%d)", st.finish, n, st.ids)
			}
			if st.finished {
				st.afterFinish += n
			}
			if seq != nil {
				for k, id := range c.ids {
					if want := seq.At(p.promptKey, st.ids+k); id != want {
						st.violate(i, vSequence, "id #%d is %d, want %d (%s)", st.ids+k, id, want, classify(seq.At, p.promptKey, st.ids+k, id))
						seq = nil // one report per stream: everything after is shifted
						break
					}
				}
			}
			st.ids += n
			st.chunks++
			g.tokens.Add(int64(n))
		}
		st.textBytes += c.textBytes
		if c.finish != nil {
			if st.finished {
				st.violate(i, vFinishTwice, "finish_reason %q after %q", c.finish, st.finish)
			} else {
				st.finished = true
				st.finish = string(c.finish)
			}
		}
		if p.disconnectAt > 0 && st.ids >= p.disconnectAt && !st.finished {
			return st, true // the deferred Close drops the connection mid-stream
		}
	}
	g.e2e.add(time.Since(sent), 1)
	return st, false
}

// classify names what a wrong id looks like: a repeat of the previous one, a skip, or other.
func classify(at func(int64, int) int32, key int64, pos int, got int32) string {
	switch {
	case pos > 0 && got == at(key, pos-1):
		return "duplicate"
	case got == at(key, pos+1) || got == at(key, pos+2):
		return "gap"
	}
	return "unexpected id"
}

// finalChecks are the promises that hold once a stream has ended.
func (g *generator) finalChecks(i int, st *streamState) {
	for _, v := range st.violations {
		if v.Kind == vHTTPStatus || v.Kind == vTransport {
			return // the stream never started or broke off: that is the one violation to report
		}
	}
	if !st.finished {
		st.violate(i, vMissingFinish, "no chunk had a finish_reason (%d ids)", st.ids)
	} else if g.cfg.IgnoreEOS && st.finish != "length" {
		st.violate(i, vFinishReason, "finish_reason %q with ignore_eos, want \"length\"", st.finish)
	}
	switch {
	case st.usageSeen == 0:
		st.violate(i, vMissingUsage, "no usage chunk")
	case st.usageSeen > 1:
		st.violate(i, vUsageTwice, "%d usage chunks", st.usageSeen)
	}
	if st.usageSeen > 0 {
		if st.usage.CompletionTokens != int64(st.ids) {
			st.violate(i, vUsageCount, "received %d ids, usage.completion_tokens %d", st.ids, st.usage.CompletionTokens)
		}
		if !g.cfg.usesText() && st.usage.PromptTokens != int64(g.cfg.InputLen) {
			st.violate(i, vPromptCount, "sent %d prompt ids, usage.prompt_tokens %d", g.cfg.InputLen, st.usage.PromptTokens)
		}
	}
	if g.cfg.IgnoreEOS && st.ids != g.cfg.OutputLen {
		st.violate(i, vLength, "received %d ids, max_tokens %d with ignore_eos", st.ids, g.cfg.OutputLen)
	}
	if !st.done {
		st.violate(i, vMissingDone, "no [DONE]")
	}
	if st.afterDone {
		st.violate(i, vAfterDone, "data after [DONE]")
	}
}

func (g *generator) record(st *streamState, disconnected bool) {
	g.textBytes.Add(int64(st.textBytes))
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case disconnected:
		g.disconnected++
	default:
		g.completed++
		g.chunks += int64(st.chunks)
		g.chunkIDs += int64(st.ids)
	}
	if len(st.violations) > 0 {
		g.failed++
	}
	for _, v := range st.violations {
		g.violations++
		g.kinds[v.Kind]++
		if len(g.kept) < maxKeptViolations {
			g.kept = append(g.kept, v)
		}
	}
}

func (g *generator) summary(wall time.Duration) Summary {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Summary{
		URL: g.cfg.URL, Endpoint: g.cfg.Endpoint, Model: g.model, Mode: "closed",
		Concurrency: g.cfg.Concurrency, InputLen: g.cfg.InputLen, OutputLen: g.cfg.OutputLen,
		Requests: int(g.started.Load()), Completed: g.completed, Disconnected: g.disconnected, Failed: g.failed,
		WallSeconds:  wall.Seconds(),
		OutputTokens: g.tokens.Load(), TextBytes: g.textBytes.Load(),
		TTFT: g.ttft.summary(), ITL: g.itl.summary(), E2E: g.e2e.summary(),
		Violations: g.violations, ViolationKinds: map[string]int{}, FirstViolations: append([]Violation(nil), g.kept...),
	}
	if g.cfg.Rate > 0 {
		s.Mode, s.Rate = "open", g.cfg.Rate
	}
	for k, n := range g.kinds {
		s.ViolationKinds[k] = n
	}
	if secs := wall.Seconds(); secs > 0 {
		s.OutputTokPerSec = float64(s.OutputTokens) / secs
		s.RequestsPerSec = float64(s.Completed) / secs
	}
	if g.completed > 0 {
		s.ChunksPerRequest = float64(g.chunks) / float64(g.completed)
	}
	if g.chunks > 0 {
		s.IDsPerChunk = float64(g.chunkIDs) / float64(g.chunks)
	}
	return s
}
