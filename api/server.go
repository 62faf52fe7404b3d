package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/tokenizer/chat"
)

// Config is how a worker's API behaves.
type Config struct {
	// ServedModelName is the id served by /v1/models; requests naming another model get a 404.
	ServedModelName string
	// ContextLength bounds prompt + generated tokens.
	ContextLength int
	// KVTokens, when set, is how many positions the smallest rank's KV cache holds (0: not
	// known yet): one request can never be longer, so it bounds max_model_len too.
	KVTokens func() int
	// DefaultSampling comes from the model's generation_config.json.
	DefaultSampling sampling.Params
	// DefaultMaxNewTokens applies to /generate when max_new_tokens is absent.
	DefaultMaxNewTokens int
	// StreamInterval is the server default: tokens per streamed chunk after the first.
	StreamInterval int
	// SkipTokenizerInit: ids only; text, chat, stop strings and grammars are refused.
	SkipTokenizerInit bool
	// MaxBodyBytes bounds a request body (0: DefaultMaxBodyBytes); a larger one is a 413.
	MaxBodyBytes int64
	// Worker is this worker's index, shown in logs and metrics.
	Worker int
	// APIKeys, when any, are the keys a request must carry (Authorization: Bearer KEY).
	APIKeys []string
	// OpenPaths need no key even when APIKeys are set (nil: DefaultOpenPaths).
	OpenPaths []string
	// ReadBodyTimeout bounds the time to read a request's body (0: none).
	ReadBodyTimeout time.Duration
	// WriteTimeout bounds each write: a whole response, or one chunk of a stream, so a client
	// that stops reading is cut (0: none).
	WriteTimeout time.Duration
	// ToolCallParser is the tool-call syntax (hermes, llama3_json, fallback); "" or auto
	// detects it from the chat template.
	ToolCallParser string
	// ReasoningParser reads thinking blocks into reasoning_content (qwen3, deepseek_r1); "" or
	// auto detects it from the chat template, none turns it off.
	ReasoningParser string
	// GrammarStrict is the grammar compiler's strict setting (--grammar-strict); a request whose
	// json_schema.strict differs has its schema rewritten to match (strict.go).
	GrammarStrict bool
	// SchedulingPolicy is the ranks' queue order (--scheduling-policy): under "priority" the
	// request's priority field orders the queue, otherwise it is accepted and named ignored.
	SchedulingPolicy string
	// Embeddings is how /v1/embeddings pools and post-processes (embeddings.go).
	Embeddings EmbeddingConfig
}

// maxModelLen is the longest prompt + generated tokens a request may have: the context length,
// or less when the ranks' KV cache holds less (then kv is true).
func (s *Server) maxModelLen() (n int, kv bool) {
	n = s.cfg.ContextLength
	if s.cfg.KVTokens != nil {
		if c := s.cfg.KVTokens(); c > 0 && c < n {
			return c, true
		}
	}
	return n, false
}

// lengthLimit names the limit n for an error message: the context length, or the KV cache and
// the setting that raises it.
func lengthLimit(n int, kv bool) string {
	if kv {
		return fmt.Sprintf("max_model_len %d: the KV cache holds %d tokens; raise the server's --kv-cache-mb (KV_CACHE_MB)", n, n)
	}
	return fmt.Sprintf("the context length (%d)", n)
}

// DefaultMaxBodyBytes is the default bound on a request body: room for a 1 MiB schema and a
// long prompt as text or ids, far below what would tie up a worker.
const DefaultMaxBodyBytes = 16 << 20

// Server is the HTTP API of one tokenizer worker.
type Server struct {
	cfg     Config
	engine  Engine
	tmpl    *chat.Template // nil when the tokenizer has no chat template
	tmplErr error
	log     *slog.Logger
	created int64
	// maxTokenBytes is the longest token's text in bytes: a text prompt longer than
	// ContextLength*maxTokenBytes*promptSlack cannot fit, and is refused before it is tokenized.
	maxTokenBytes int

	// stopping is canceled by Stop: requests in flight end.
	stopping context.Context
	stopNow  context.CancelFunc

	// draining is set on SIGTERM, before the drain starts: /health answers 503 from then on,
	// so load balancers and readiness probes stop sending new requests here.
	draining atomic.Bool

	// reg is what /metrics writes; met are the API's series in it.
	reg *metrics.Registry
	met *serverMetrics
}

// NewServer wires the handlers. reg receives the API's metrics and is what /metrics writes
// (the worker registers its own gauges there too).
func NewServer(cfg Config, engine Engine, reg *metrics.Registry, log *slog.Logger) (*Server, error) {
	if cfg.StreamInterval < 1 {
		return nil, fmt.Errorf("stream interval must be an integer >= 1, got %d", cfg.StreamInterval)
	}
	if cfg.DefaultMaxNewTokens <= 0 {
		cfg.DefaultMaxNewTokens = 128
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.OpenPaths == nil {
		cfg.OpenPaths = DefaultOpenPaths
	}
	for _, k := range cfg.APIKeys {
		if k == "" || strings.ContainsAny(k, " \t\r\n") {
			return nil, fmt.Errorf("an API key must be non-empty and contain no whitespace")
		}
	}
	ae := &accessEngine{Engine: engine}
	s := &Server{cfg: cfg, engine: ae, log: log, created: time.Now().Unix(), reg: reg}
	s.stopping, s.stopNow = context.WithCancel(context.Background())
	if tok := engine.Tokenizer(); tok != nil {
		for id := 0; id < tok.VocabSize(); id++ {
			s.maxTokenBytes = max(s.maxTokenBytes, len(tok.TokenBytes(int32(id))))
		}
	}
	if tok := engine.Tokenizer(); tok != nil && tok.ChatTemplate() != "" {
		s.tmpl, s.tmplErr = chat.Compile(tok.ChatTemplate())
		if s.tmplErr != nil {
			return nil, fmt.Errorf("compile chat template: %w", s.tmplErr)
		}
	}
	s.met = newServerMetrics(reg, cfg.ServedModelName)
	ae.met = s.met
	return s, nil
}

// Handler returns the HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", generation(s, "/v1/completions", s.buildCompletion))
	mux.HandleFunc("POST /v1/chat/completions", generation(s, "/v1/chat/completions", s.buildChat))
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	mux.HandleFunc("POST /generate", generation(s, "/generate", s.buildGenerate))
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /get_load", s.handleLoad)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		// Which worker answered: every scrape shows every worker's series, so only this says
		// whose connection it was (for an operator chasing one worker's scrapes).
		w.Header().Set("X-LLMServe-Worker", strconv.Itoa(s.cfg.Worker))
		s.reg.WriteText(w)
	})
	s.extRoutes(mux)
	s.pageRoutes(mux)
	return s.access(s.readDeadline(s.authenticate(mux)))
}

// readDeadline bounds the time to read each request's body (serve lifts it once the body is in).
func (s *Server) readDeadline(h http.Handler) http.Handler {
	if s.cfg.ReadBodyTimeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadBodyTimeout))
		h.ServeHTTP(w, r)
	})
}

// apiError is the OpenAI error body.
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    int    `json:"code"`
}

func (s *Server) writeError(w http.ResponseWriter, status int, err error) {
	s.met.errorCounter(status).Inc()
	e := apiError{Message: clipMessage(err.Error()), Code: status, Type: "invalid_request_error"}
	var bre *BadRequestError
	if errors.As(err, &bre) {
		e.Param = clip(bre.Param)
	}
	switch {
	case status == http.StatusNotFound:
		e.Type = "not_found_error"
	case status == http.StatusUnauthorized:
		e.Type = "authentication_error"
	case status == http.StatusServiceUnavailable:
		e.Type = "service_unavailable"
		w.Header().Set("Retry-After", "1")
	case status >= 500:
		e.Type = "internal_server_error"
	}
	if sw := findStatusWriter(w); sw != nil && sw.reason == "" {
		sw.reason = e.Message // the access line says why
		sw.grammarRefused = errors.As(err, new(*grammarRefusal))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]apiError{"error": e})
}

// fail answers err with its status: 400 for a *BadRequestError, 404 for an unknown model, 503
// otherwise (the engine could not take the request: overloaded, a rank down, shutting down).
func (s *Server) fail(w http.ResponseWriter, err error) {
	var bre *BadRequestError
	var nf *notFoundError
	var tl *tooLargeError
	switch {
	case errors.As(err, &bre):
		s.writeError(w, http.StatusBadRequest, err)
	case errors.As(err, &tl):
		s.writeError(w, http.StatusRequestEntityTooLarge, err)
	case errors.As(err, new(*unsupportedEncodingError)):
		s.writeError(w, http.StatusUnsupportedMediaType, err)
	case errors.As(err, &nf):
		s.writeError(w, http.StatusNotFound, err)
	default:
		s.writeError(w, http.StatusServiceUnavailable, err)
	}
}

// failOutput answers a request whose output ended in err (a Delta's): the engine's refusal of
// the request as the client's fault (a *BadRequestError: a rank judged it) is a 400 with the
// reason alone; anything else is the engine's fault, a 500 saying how far the request got (what).
func (s *Server) failOutput(w http.ResponseWriter, err error, what string) {
	if status := outputStatus(err); status < 500 {
		s.writeError(w, status, err)
		return
	}
	s.writeError(w, http.StatusInternalServerError, fmt.Errorf("%s: %w", what, err))
}

// outputStatus is the status of a request whose output ended in err, as its answer or its
// stream's error event names it: 400 for the engine's refusal of it as the client's fault, else
// 500.
func outputStatus(err error) int {
	if errors.As(err, new(*BadRequestError)) {
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// notFoundError names something the request asked for that this server does not have (HTTP 404).
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// decodeBody reads a JSON body into v: at most MaxBodyBytes (a larger Content-Length is refused
// before anything is read), keys matched exactly (see checkKeys), unknown fields and trailing
// data refused.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return &tooLargeError{limit: s.cfg.MaxBodyBytes}
	}
	data, err := s.readBody(w, r)
	if err != nil {
		var ue *unsupportedEncodingError
		var tl *tooLargeError
		if errors.As(err, &ue) || errors.As(err, &tl) {
			return err
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &tooLargeError{limit: mbe.Limit}
		}
		return badRequest("", "reading the request body: "+err.Error())
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("", "empty request body")
	}
	if err := checkKeys(data, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return badRequest("", "invalid JSON body: trailing data after the object")
	}
	return nil
}

// readBody reads r's body, at most MaxBodyBytes on the wire and, when it is gzip-compressed
// (Content-Encoding: gzip), at most MaxBodyBytes decompressed too: a small bomb is a 413 like a
// large body. Another content coding is refused (415) rather than read as JSON.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return io.ReadAll(body)
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		data, err := io.ReadAll(io.LimitReader(zr, s.cfg.MaxBodyBytes+1))
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		if int64(len(data)) > s.cfg.MaxBodyBytes {
			return nil, &tooLargeError{limit: s.cfg.MaxBodyBytes, decompressed: true}
		}
		return data, nil
	default:
		return nil, &unsupportedEncodingError{enc: enc}
	}
}

// unsupportedEncodingError is a body in a content coding this server does not decode (HTTP 415).
type unsupportedEncodingError struct{ enc string }

func (e *unsupportedEncodingError) Error() string {
	return fmt.Sprintf("Content-Encoding %q is not supported: send the body as is or gzip-compressed", clip(e.enc))
}

// tooLargeError is a request body over the limit (HTTP 413).
type tooLargeError struct {
	limit int64
	// decompressed says the limit was passed once the body was decompressed.
	decompressed bool
}

func (e *tooLargeError) Error() string {
	if e.decompressed {
		return fmt.Sprintf("request body larger than %d bytes once decompressed", e.limit)
	}
	return fmt.Sprintf("request body larger than %d bytes", e.limit)
}

func (s *Server) checkModel(model string) error {
	if model != "" && model != s.cfg.ServedModelName {
		return &notFoundError{fmt.Sprintf("model %q does not exist; this server serves %q", model, s.cfg.ServedModelName)}
	}
	return nil
}

func (s *Server) needTokenizer(what string) error {
	if s.cfg.SkipTokenizerInit || s.engine.Tokenizer() == nil {
		return badRequest("", what+" needs a tokenizer, and the server runs with --skip-tokenizer-init: send input_ids / token arrays instead")
	}
	return nil
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{s.modelObject()}})
}

// SetDraining makes /health answer 503 (the worker is shutting down) from now on.
func (s *Server) SetDraining() { s.draining.Store(true) }

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		s.writeError(w, http.StatusServiceUnavailable, errors.New("shutting down: draining, send new requests elsewhere"))
		return
	}
	if err := s.engine.Health(); err != nil {
		s.writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) handleLoad(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.engine.Load())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// outputFormat writes one endpoint's response to a generation request.
type outputFormat interface {
	// chunk appends the SSE events for d (content, then error and finish events as d says).
	chunk(dst []byte, d *Delta, first bool) []byte
	// whole appends the non-streamed response object for the merged output d.
	whole(dst []byte, d *Delta) []byte
}

// generation is the one request path of the generation endpoints (completions, chat, generate):
// decode the body, let build validate it into a Request and choose its response format, run it,
// and answer with one JSON object or an SSE stream.
func generation[B any](s *Server, endpoint string, build func(body *B, start time.Time) (*Request, outputFormat, error)) http.HandlerFunc {
	requests := s.met.requests[endpoint]
	if requests == nil {
		panic("api: no request counter registered for " + endpoint) // at Handler, not at a request
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		requests.Inc()
		var body B
		if err := s.decodeBody(w, r, &body); err != nil {
			s.fail(w, err)
			return
		}
		req, f, err := build(&body, start)
		if err != nil {
			s.fail(w, err)
			return
		}
		s.reportIgnored(w, endpoint, &body)
		if cs, ok := f.(*choiceSet); ok {
			s.serveChoices(w, r, cs, start)
			return
		}
		s.serve(w, r, req, f, start)
	}
}

// serve submits req, aborts it when the client goes away, and writes its output as f says. When
// the server is stopped (Stop) it ends the request cleanly: a stream gets the tokens pending and
// a final error event, a whole response a 503 saying how far it got.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, req *Request, f outputFormat, start time.Time) {
	rc := http.NewResponseController(w)
	// The body has been read: no read deadline while the request runs (an expired one would end
	// the server's watch for a client that goes away, and cancel the request with it).
	_ = rc.SetReadDeadline(time.Time{})
	if s.stopping.Err() != nil {
		s.fail(w, errShuttingDown) // a 503: retry on another server
		return
	}
	st, err := s.engine.Submit(r.Context(), req)
	if err != nil {
		s.fail(w, err)
		return
	}
	// The client is gone when its connection ends (the request context) or when it stopped
	// reading and a write timed out (streamSSE returns unfinished): either way the request is
	// aborted, once.
	gone := sync.OnceFunc(func() {
		if !st.Done() {
			s.met.disconnects.Inc()
			s.engine.Abort(st.RID)
		}
	})
	disconnect := context.AfterFunc(r.Context(), gone)
	defer disconnect()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.stopping, func() {
		cancel(errShuttingDown)
		if !st.Done() {
			s.engine.Abort(st.RID)
		}
	})
	defer stop()
	if req.Stream {
		if !s.streamSSE(ctx, w, st, req.StreamInterval, f, start) && context.Cause(ctx) != errShuttingDown {
			gone()
		}
		return
	}
	d, err := s.collect(ctx, st)
	if err != nil && context.Cause(ctx) != errShuttingDown {
		return // client gone: the abort was sent by the AfterFunc
	}
	s.met.finished(&d, st, start)
	_ = rc.SetWriteDeadline(s.writeDeadline())
	switch {
	case err != nil:
		// The rank holds a whole request's tokens until it ends: the abort sent at the stop
		// brings them (and its count) back within a step. Wait a moment for it, so the 503
		// says how far the request really got.
		wctx, cancel := context.WithTimeout(context.Background(), abortAnswerWait)
		_, _ = s.collect(wctx, st)
		cancel()
		_, _, n := st.Usage()
		s.writeError(w, http.StatusServiceUnavailable, fmt.Errorf("request ended after %d tokens: %w", n, errShuttingDown))
	case d.Err != nil:
		s.failOutput(w, d.Err, fmt.Sprintf("generation failed after %d tokens", len(d.IDs)))
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(f.whole(nil, &d))
	}
}

// abortAnswerWait bounds the wait for the rank's answer to the abort of a whole request that
// the server's stop ended (well within the drain's last moment for writes).
const abortAnswerWait = time.Second

// errShuttingDown ends the requests still running when the server stops.
var errShuttingDown = errors.New("server shutting down")

// Stop ends every request in flight, and every one that arrives later, as serve describes, and
// aborts each at the engine. The HTTP server's drain calls it when its grace period is over.
func (s *Server) Stop() { s.stopNow() }

// writeDeadline is the deadline of the next write (0 WriteTimeout: none).
func (s *Server) writeDeadline() time.Time {
	if s.cfg.WriteTimeout <= 0 {
		return time.Time{}
	}
	return time.Now().Add(s.cfg.WriteTimeout)
}

// collect waits for the whole output of a non-streaming request. When ctx ends first it returns
// what has arrived so far with ctx's error.
func (s *Server) collect(ctx context.Context, st *Stream) (Delta, error) {
	var all Delta
	for {
		d, err := st.Next(ctx, 1<<30)
		if err != nil {
			return all, err
		}
		all.Merge(&d)
		if d.Finished {
			return all, nil
		}
	}
}
