package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The access log: one line per HTTP request, at info (the operator's probes, /metrics, /health
// and /get_load, at debug), naming the request id that the client sent in X-Request-Id or that
// the server made, which the response echoes and the rank's and detokd's lines repeat.

// requestIDHeader is the header a request id arrives and leaves in.
const requestIDHeader = "X-Request-Id"

// maxRequestIDLen bounds a client's request id: room for a UUID or a trace id with a prefix.
const maxRequestIDLen = 128

// checkRequestID refuses a request id that would corrupt a log line: empty, over
// maxRequestIDLen bytes, or with a character outside printable ASCII.
func checkRequestID(id string) error {
	if id == "" || len(id) > maxRequestIDLen {
		return fmt.Errorf("must be 1 to %d characters, got %d", maxRequestIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("character %d (%q) is not printable ASCII", i, c)
		}
	}
	return nil
}

// newRequestID makes a request id for a request that came without one: 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// accessRecord is what the handlers of one request tell its access line: the generation
// requests it submitted (one per choice) and their usage.
type accessRecord struct {
	id    string
	start time.Time
	// mu guards what follows: choices may finish on their own goroutines.
	mu               sync.Mutex
	ranks            []int
	promptTokens     int // the largest prompt of its choices (they share one)
	completionTokens int // summed over the choices
	firstToken       time.Time
	dispatched       bool // a generation request was submitted (preprocess time observed)
}

type accessKey struct{}

// accessFrom is the access record of the request ctx belongs to; nil outside the middleware.
func accessFrom(ctx context.Context) *accessRecord {
	rec, _ := ctx.Value(accessKey{}).(*accessRecord)
	return rec
}

// firstSubmit reports whether no generation request of this HTTP request was submitted yet
// (its other choices go later, some after the first one's first token).
func (a *accessRecord) firstSubmit() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	first := !a.dispatched
	a.dispatched = true
	return first
}

// submitted notes that a generation request went to rank.
func (a *accessRecord) submitted(rank int) {
	a.mu.Lock()
	a.ranks = append(a.ranks, rank)
	a.mu.Unlock()
}

// finished adds a finished choice's usage and first token time.
func (a *accessRecord) finished(d *Delta, first time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.promptTokens = max(a.promptTokens, d.PromptTokens)
	a.completionTokens += d.CompletionTokens
	if !first.IsZero() && (a.firstToken.IsZero() || first.Before(a.firstToken)) {
		a.firstToken = first
	}
}

// statusWriter remembers the status a handler answered with. Unwrap lets
// http.ResponseController reach the connection (flushes, deadlines).
type statusWriter struct {
	http.ResponseWriter
	status int
	// reason is the message of the error the request was answered with ("" if none).
	reason string
	// grammarRefused says the answer refuses the request's grammar (a *grammarRefusal).
	grammarRefused bool
}

// findStatusWriter is the statusWriter under w (nil outside the access middleware).
func findStatusWriter(w http.ResponseWriter) *statusWriter {
	for w != nil {
		if sw, ok := w.(*statusWriter); ok {
			return sw
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// probePaths are logged at debug: a scraper or a health check would fill the log at info.
var probePaths = map[string]bool{"/metrics": true, "/health": true, "/get_load": true}

// access takes or makes each request's id, echoes it in the response, and writes the request's
// access line when its handler returns.
func (s *Server) access(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &accessRecord{start: time.Now()}
		sw := &statusWriter{ResponseWriter: w}
		given := r.Header.Values(requestIDHeader)
		var bad error
		switch {
		case len(given) > 1:
			bad = fmt.Errorf("given %d times", len(given))
		case len(given) == 1:
			bad = checkRequestID(given[0])
		}
		if len(given) == 1 && bad == nil {
			rec.id = given[0]
		} else {
			rec.id = newRequestID()
		}
		w.Header().Set(requestIDHeader, rec.id)
		if bad != nil {
			s.writeError(sw, http.StatusBadRequest, badRequest(requestIDHeader, bad.Error()))
		} else {
			h.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), accessKey{}, rec)))
			if sw.grammarRefused {
				pauseRefusal(r.Context(), rec.start, time.Now())
			}
		}
		s.logAccess(r, sw.status, sw.reason, rec)
	})
}

// refusalPauseFactor and maxRefusalPause set how long the answer to a refused grammar waits:
// refusalPauseFactor times what the request took until refused (reading and decoding its body,
// the compile), at most maxRefusalPause and never past the request's compile budget
// (requestCompileBudget from its arrival: a request is answered within its deadline).
var (
	refusalPauseFactor = 3
	maxRefusalPause    = 2 * time.Second
)

// pauseRefusal holds the answer of a request that arrived at start and whose grammar was refused
// by now (the answer is still buffered: net/http sends it when the handler returns) for
// refusalPauseFactor times what it took, or until the client leaves. A client that sends refused grammars back to back, each costing tens
// of milliseconds of CPU to read, decode and refuse, then spends at most a quarter of a core on
// them instead of a whole one beside the model's forward; a grammar refused at once for a typo
// waits a few milliseconds. Only the client's connection waits: its goroutine holds no CPU and
// no compile slot, and nobody else's request waits behind it.
func pauseRefusal(ctx context.Context, start, now time.Time) {
	d := min(time.Duration(refusalPauseFactor)*now.Sub(start), maxRefusalPause, start.Add(requestCompileBudget).Sub(now))
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// logAccess writes rec's access line.
func (s *Server) logAccess(r *http.Request, status int, reason string, rec *accessRecord) {
	lvl := slog.LevelInfo
	if probePaths[r.URL.Path] && status < 400 {
		lvl = slog.LevelDebug
	}
	ctx := context.Background()
	if !s.log.Enabled(ctx, lvl) {
		return
	}
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing: net/http answers 200
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("endpoint", r.URL.Path), slog.Int("status", status),
		slog.String("request_id", rec.id), slog.Duration("duration", time.Since(rec.start)),
	}
	if reason != "" {
		attrs = append(attrs, slog.String("error", reason))
	}
	if len(rec.ranks) > 0 {
		attrs = append(attrs, slog.Int("prompt_tokens", rec.promptTokens), slog.Int("completion_tokens", rec.completionTokens))
		if !rec.firstToken.IsZero() {
			attrs = append(attrs, slog.Duration("ttft", rec.firstToken.Sub(rec.start)))
		}
		if len(rec.ranks) == 1 {
			attrs = append(attrs, slog.Int("rank", rec.ranks[0]))
		} else {
			rs := make([]string, len(rec.ranks))
			for i, rk := range rec.ranks {
				rs[i] = strconv.Itoa(rk)
			}
			attrs = append(attrs, slog.String("rank", strings.Join(rs, ",")))
		}
	}
	s.log.LogAttrs(ctx, lvl, "request", attrs...)
}

// accessEngine is the server's view of its engine: each submitted request carries the request
// id of the HTTP request it came in, and its stream reports its usage to that request's access
// line.
// It also times what the engine does for the API: arrival to dispatch, and grammar checks.
type accessEngine struct {
	Engine
	met *serverMetrics // set once NewServer has registered them
}

// Submit implements Engine.
func (e *accessEngine) Submit(ctx context.Context, req *Request) (*Stream, error) {
	rec := accessFrom(ctx)
	if rec != nil {
		if req.RequestID == "" {
			req.RequestID = rec.id
		}
		if rec.firstSubmit() {
			e.met.preprocess.Observe(time.Since(rec.start).Seconds())
		}
	}
	st, err := e.Engine.Submit(ctx, req)
	if err == nil && rec != nil {
		st.access, st.streamed = rec, req.Stream
		rec.submitted(st.Rank)
	}
	return st, err
}

// CheckGrammarBy implements GrammarDeadlineChecker where the wrapped engine does.
func (e *accessEngine) CheckGrammarBy(by time.Time, kind GrammarKind, spec string) error {
	dc, ok := e.Engine.(GrammarDeadlineChecker)
	if !ok {
		return e.CheckGrammar(kind, spec)
	}
	start := time.Now()
	err := dc.CheckGrammarBy(by, kind, spec)
	e.met.grammarCheck.Observe(time.Since(start).Seconds())
	return err
}

// CheckGrammar implements Engine.
func (e *accessEngine) CheckGrammar(kind GrammarKind, spec string) error {
	start := time.Now()
	err := e.Engine.CheckGrammar(kind, spec)
	e.met.grammarCheck.Observe(time.Since(start).Seconds())
	return err
}

// RankOf implements RankFinder when the engine does.
func (e *accessEngine) RankOf(rid string) (int, bool) {
	if rf, ok := e.Engine.(RankFinder); ok {
		return rf.RankOf(rid)
	}
	return 0, false
}
