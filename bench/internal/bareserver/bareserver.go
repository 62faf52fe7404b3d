// Package bareserver answers OpenAI-compatible requests with no engine behind them: each stream
// is a run of pre-formatted chunks carrying deterministic token ids, written as cheaply as the
// HTTP path allows (one Write and one Flush per chunk), so a load test against it measures the
// ceiling of HTTP + SSE on the machine rather than anything an engine does.
package bareserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

// Config says what the server streams.
type Config struct {
	// Model is the name /v1/models lists and every chunk carries.
	Model string
	// Sequence gives the i-th token id of a request (see tokseq.PromptKeyed: the key is the
	// last prompt token id, or 0 for text prompts and chat).
	Sequence tokseq.Sequence
	// TokenInterval is waited before each token, the first included, to stand in for a
	// decode step; 0 streams as fast as the connection takes it.
	TokenInterval time.Duration
	// DefaultMaxTokens is used when a request sets no max_tokens.
	DefaultMaxTokens int
}

// maxTokensCap bounds what one request may ask for, so a typo cannot pin a connection for hours.
const maxTokensCap = 1 << 20

// maxBodyBytes bounds a request body.
const maxBodyBytes = 64 << 20

// Server is the bare SSE server. Its zero value is not usable; call New.
type Server struct {
	cfg       Config
	created   string // unix seconds at start: the same in every chunk, as a real server's would differ only per request
	modelJSON []byte // Model as a JSON string literal
	nextID    atomic.Uint64
	active    atomic.Int64
	served    atomic.Uint64
}

// New checks cfg and returns a server.
func New(cfg Config) (*Server, error) {
	if cfg.Model == "" {
		return nil, errors.New("bareserver: empty model name")
	}
	if cfg.Sequence.Mod <= 0 {
		return nil, fmt.Errorf("bareserver: sequence %s has no positive modulus", cfg.Sequence)
	}
	if cfg.TokenInterval < 0 {
		return nil, fmt.Errorf("bareserver: negative token interval %s", cfg.TokenInterval)
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 16
	}
	m, err := json.Marshal(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("bareserver: model name: %w", err)
	}
	return &Server{cfg: cfg, modelJSON: m, created: strconv.FormatInt(time.Now().Unix(), 10)}, nil
}

// Active is the number of requests being answered now.
func (s *Server) Active() int64 { return s.active.Load() }

// Served is the number of requests answered to the end (not counting client disconnects).
func (s *Server) Served() uint64 { return s.served.Load() }

// Handler routes the OpenAI endpoints, /get_load and /health.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /get_load", s.load)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	body := `{"object":"list","data":[{"id":` + string(s.modelJSON) + `,"object":"model","created":` + s.created + `,"owned_by":"baresse"}]}` + "\n"
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

// load reports the streams in progress as running; nothing ever waits here.
func (s *Server) load(w http.ResponseWriter, _ *http.Request) {
	n := strconv.FormatInt(s.active.Load(), 10)
	body := `{"in_flight":` + n + `,"totals":{"running":` + n + `,"waiting":0,"kv_tokens_used":0,"kv_tokens_capacity":0}}` + "\n"
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(body))
}

// request holds the fields the server honours; everything else is accepted and ignored.
type request struct {
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ReturnTokenIDs bool `json:"return_token_ids"`
	StreamInterval *int `json:"stream_interval"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// job is one validated request.
type job struct {
	chat         bool
	key          int64 // sequence key: last prompt id, or 0
	promptTokens int
	maxTokens    int
	interval     int
	stream       bool
	usage        bool
	ids          bool
}

func (s *Server) parse(w http.ResponseWriter, r *http.Request, chat bool) (job, error) {
	var req request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(&req); err != nil {
		return job{}, fmt.Errorf("decode body: %w", err)
	}
	j := job{chat: chat, maxTokens: s.cfg.DefaultMaxTokens, interval: 1, stream: req.Stream, ids: req.ReturnTokenIDs}
	j.usage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	switch {
	case req.MaxTokens != nil:
		j.maxTokens = *req.MaxTokens
	case req.MaxCompletionTokens != nil:
		j.maxTokens = *req.MaxCompletionTokens
	}
	if j.maxTokens < 1 || j.maxTokens > maxTokensCap {
		return job{}, fmt.Errorf("max_tokens must be in 1..%d, got %d", maxTokensCap, j.maxTokens)
	}
	if req.StreamInterval != nil {
		if *req.StreamInterval < 1 {
			return job{}, fmt.Errorf("stream_interval must be an integer >= 1, got %d", *req.StreamInterval)
		}
		j.interval = *req.StreamInterval
	}
	if chat {
		if len(req.Messages) == 0 {
			return job{}, errors.New("messages must be a non-empty array")
		}
		for _, m := range req.Messages {
			var text string
			if json.Unmarshal(m.Content, &text) == nil {
				j.promptTokens += len(strings.Fields(text))
			}
		}
		return j, nil
	}
	trimmed := strings.TrimSpace(string(req.Prompt))
	switch {
	case strings.HasPrefix(trimmed, "["):
		var ids []int64
		if err := json.Unmarshal(req.Prompt, &ids); err != nil {
			return job{}, fmt.Errorf("prompt: want a string or an array of token ids: %w", err)
		}
		if len(ids) == 0 {
			return job{}, errors.New("prompt: empty token id array")
		}
		j.promptTokens = len(ids)
		j.key = ids[len(ids)-1]
	case strings.HasPrefix(trimmed, `"`):
		var text string
		if err := json.Unmarshal(req.Prompt, &text); err != nil {
			return job{}, fmt.Errorf("prompt: %w", err)
		}
		j.promptTokens = len(strings.Fields(text))
	default:
		return job{}, errors.New("prompt: want a string or an array of token ids")
	}
	return j, nil
}

func writeError(w http.ResponseWriter, status int, err error) {
	msg, _ := json.Marshal(err.Error())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":{"message":%s,"type":"invalid_request_error","code":%d}}`+"\n", msg, status)
}

// templates are the fixed byte runs around a chunk's variable parts, built once per request.
type templates struct {
	head     []byte // `data: {...,"choices":[{"index":0,` up to the text's opening quote
	headRole []byte // head for the first chat chunk, which also carries the role
	afterTxt []byte // closes the text (and delta) and opens token_ids, or goes to logprobs
	usage    []byte // `data: {...,"choices":[],"usage":{"prompt_tokens":`
}

func (s *Server) templates(j *job) templates {
	id := s.nextID.Add(1)
	var common []byte
	if j.chat {
		common = fmt.Appendf(nil, `data: {"id":"chatcmpl-%x","object":"chat.completion.chunk","created":%s,"model":%s`, id, s.created, s.modelJSON)
	} else {
		common = fmt.Appendf(nil, `data: {"id":"cmpl-%x","object":"text_completion","created":%s,"model":%s`, id, s.created, s.modelJSON)
	}
	t := templates{}
	if j.chat {
		t.head = append(append([]byte{}, common...), `,"choices":[{"index":0,"delta":{"content":"`...)
		t.headRole = append(append([]byte{}, common...), `,"choices":[{"index":0,"delta":{"role":"assistant","content":"`...)
		t.afterTxt = []byte(`"}`)
	} else {
		t.head = append(append([]byte{}, common...), `,"choices":[{"index":0,"text":"`...)
		t.headRole = t.head
		t.afterTxt = []byte(`"`)
	}
	t.usage = append(append([]byte{}, common...), `,"choices":[],"usage":{"prompt_tokens":`...)
	return t
}

// appendText appends the text of token id: " t<id>", plain ASCII so no escaping is needed.
func appendText(dst []byte, id int32) []byte {
	dst = append(dst, " t"...)
	return strconv.AppendInt(dst, int64(id), 10)
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	j, err := s.parse(w, r, chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	s.active.Add(1)
	defer s.active.Add(-1)
	if !j.stream {
		s.whole(w, r, &j)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("response writer cannot flush"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	t := s.templates(&j)
	var timer *time.Timer
	if s.cfg.TokenInterval > 0 {
		timer = time.NewTimer(time.Hour)
		defer timer.Stop()
	}
	buf := make([]byte, 0, 512)
	for i := 0; i < j.maxTokens; {
		// The first token goes out alone, then every interval tokens, then the rest.
		n := j.interval
		if i == 0 {
			n = 1
		}
		n = min(n, j.maxTokens-i)
		if timer != nil {
			timer.Reset(time.Duration(n) * s.cfg.TokenInterval)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		last := i+n == j.maxTokens
		if i == 0 {
			buf = append(buf[:0], t.headRole...)
		} else {
			buf = append(buf[:0], t.head...)
		}
		for k := i; k < i+n; k++ {
			buf = appendText(buf, s.cfg.Sequence.At(j.key, k))
		}
		buf = append(buf, t.afterTxt...)
		if j.ids {
			buf = append(buf, `,"token_ids":[`...)
			for k := i; k < i+n; k++ {
				if k > i {
					buf = append(buf, ',')
				}
				buf = strconv.AppendInt(buf, int64(s.cfg.Sequence.At(j.key, k)), 10)
			}
			buf = append(buf, ']')
		}
		if last {
			buf = append(buf, `,"logprobs":null,"finish_reason":"length"}]}`+"\n\n"...)
			if j.usage {
				buf = append(buf, t.usage...)
				buf = strconv.AppendInt(buf, int64(j.promptTokens), 10)
				buf = append(buf, `,"completion_tokens":`...)
				buf = strconv.AppendInt(buf, int64(j.maxTokens), 10)
				buf = append(buf, `,"total_tokens":`...)
				buf = strconv.AppendInt(buf, int64(j.promptTokens+j.maxTokens), 10)
				buf = append(buf, "}}\n\n"...)
			}
			buf = append(buf, "data: [DONE]\n\n"...)
		} else {
			buf = append(buf, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			return // client gone
		}
		fl.Flush()
		i += n
	}
	s.served.Add(1)
}

// whole answers a non-streamed request with the complete response object.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, j *job) {
	if s.cfg.TokenInterval > 0 {
		select {
		case <-time.After(time.Duration(j.maxTokens) * s.cfg.TokenInterval):
		case <-r.Context().Done():
			return
		}
	}
	id := s.nextID.Add(1)
	var buf []byte
	if j.chat {
		buf = fmt.Appendf(buf, `{"id":"chatcmpl-%x","object":"chat.completion","created":%s,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":"`, id, s.created, s.modelJSON)
	} else {
		buf = fmt.Appendf(buf, `{"id":"cmpl-%x","object":"text_completion","created":%s,"model":%s,"choices":[{"index":0,"text":"`, id, s.created, s.modelJSON)
	}
	for k := range j.maxTokens {
		buf = appendText(buf, s.cfg.Sequence.At(j.key, k))
	}
	if j.chat {
		buf = append(buf, `"}`...)
	} else {
		buf = append(buf, '"')
	}
	if j.ids {
		buf = append(buf, `,"token_ids":[`...)
		for k := range j.maxTokens {
			if k > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendInt(buf, int64(s.cfg.Sequence.At(j.key, k)), 10)
		}
		buf = append(buf, ']')
	}
	buf = fmt.Appendf(buf, `,"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n",
		j.promptTokens, j.maxTokens, j.promptTokens+j.maxTokens)
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(buf); err == nil {
		s.served.Add(1)
	}
}
