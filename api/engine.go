// Package api serves a tokenizer worker's HTTP API: the OpenAI-compatible endpoints
// (/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models), the SGLang-style native ones (/generate,
// /tokenize, /detokenize, /get_load) and the operator's (/health, /metrics). It validates input,
// tokenizes and renders chat templates, and streams each request's Stream as SSE; everything
// behind the Engine interface (sockets, dispatch, detokenization) belongs to the worker.
package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/tokenizer"
)

// GrammarKind selects a structured-output constraint: the grammar package's kind (the worker
// compiles it as is; the wire carries it as ipc.GrammarKind), named here so the API reads as
// before.
type GrammarKind = grammar.Kind

// Grammar kinds.
const (
	GrammarNone       = grammar.KindNone
	GrammarJSONSchema = grammar.KindJSONSchema
	GrammarJSONObject = grammar.KindJSONObject
	GrammarRegex      = grammar.KindRegex
	// GrammarCompose is a composed grammar (tool calls, reasoning): GrammarSpec is a grammar.Part
	// as JSON.
	GrammarCompose = grammar.KindCompose
	// GrammarGBNF is a context-free grammar in llama.cpp's GBNF syntax (start rule root).
	GrammarGBNF = grammar.KindGBNF
)

// Request is one validated generation request, ready to dispatch.
type Request struct {
	RID               string
	InputIDs          []int32
	Sampling          sampling.Params
	MaxNewTokens      int
	MinNewTokens      int
	StopStrings       []string
	StopTokenIDs      []int32
	IgnoreEOS         bool
	SkipSpecialTokens bool
	Stream            bool
	StreamInterval    int
	Logprobs          bool
	// TopLogprobs is how many most likely tokens to report at each generated position (0-20).
	TopLogprobs int
	// PromptLogprobs asks for the prompt tokens' logprobs (echo with logprobs, prompt_logprobs,
	// logprob_start_len), with TopLogprobs entries each.
	PromptLogprobs bool
	GrammarKind    GrammarKind
	GrammarSpec    string
	// RoutedRank pins the request to one data-parallel rank; -1 lets the dispatcher choose.
	RoutedRank int
	// NoText asks for token ids only (no detokenization).
	NoText bool
	// RequestID is the client's X-Request-Id (or one the server made), carried to the rank's
	// log lines.
	RequestID string
	// Priority orders the rank's queue under --scheduling-policy priority (lower first).
	Priority int
	// Pooling, when set, makes this an embedding request (/v1/embeddings): the rank runs the
	// prompt without sampling and its finishing Delta carries the pooled vector (Embedding).
	Pooling Pooling
	// compileBy is the deadline shared by all the request's grammar compiles (compileDeadline);
	// not sent to the rank.
	compileBy time.Time
}

// Pooling says how an embedding request's final hidden states become one vector: the
// scheduler's type, which the API hands on unchanged (only the wire has its own).
type Pooling = scheduler.Pooling

// Pooling modes.
const (
	PoolingNone = scheduler.PoolingNone // a generation request
	PoolingLast = scheduler.PoolingLast // the last token's state (decoder embedders such as Qwen3-Embedding)
	PoolingMean = scheduler.PoolingMean // the mean over the prompt's tokens
	PoolingCLS  = scheduler.PoolingCLS  // the first token's state
)

// ParsePooling reads a pooling name: last, mean or cls.
func ParsePooling(name string) (Pooling, error) {
	switch name {
	case "last", "lasttoken":
		return PoolingLast, nil
	case "mean":
		return PoolingMean, nil
	case "cls":
		return PoolingCLS, nil
	}
	return PoolingNone, fmt.Errorf("unknown pooling %q (last, mean or cls)", name)
}

// GrammarDeadlineChecker is an Engine that bounds a request's grammar compile work by one
// deadline: every check of the request (each tool's parameters, then the composed constraint)
// returns by it with its work stopped, so a request of many large tools cannot spend minutes of
// a worker's CPU one compile at a time.
type GrammarDeadlineChecker interface {
	CheckGrammarBy(deadline time.Time, kind GrammarKind, spec string) error
}

// requestCompileBudget is the most time one request's grammar compiles may take together (a
// variable for tests).
var requestCompileBudget = 30 * time.Second

// checkGrammarBy checks a constraint within the request's compile deadline where the engine
// supports one.
func (s *Server) checkGrammarBy(by time.Time, kind GrammarKind, spec string) error {
	if dc, ok := s.engine.(GrammarDeadlineChecker); ok {
		return dc.CheckGrammarBy(by, kind, spec)
	}
	return s.engine.CheckGrammar(kind, spec)
}

// Engine is what the API needs from the worker behind it.
type Engine interface {
	// Submit dispatches req and returns its output mailbox. ErrOverloaded means the queue is
	// full; a *BadRequestError means req was refused for a reason the client can fix, and so
	// does one as the Err of the stream's finishing Delta (a rank refused it).
	Submit(ctx context.Context, req *Request) (*Stream, error)
	// Abort stops the request whose Stream has RID rid (the engine's id for it, not the
	// client's) and frees its resources; unknown rids are ignored.
	Abort(rid string)
	// Tokenizer is nil when the engine runs with --skip-tokenizer-init.
	Tokenizer() *tokenizer.Tokenizer
	// CheckGrammar compiles a constraint (cached) so a bad schema or regex is refused up front.
	CheckGrammar(kind GrammarKind, spec string) error
	// Health is nil when every rank (and detokd, if used) answers.
	Health() error
	// Load is the per-rank and total load shown by /get_load.
	Load() LoadReport
	// NewRID returns a fresh request id owned by this worker.
	NewRID() string
}

// LoadReport is what /get_load shows: one worker's view of every rank (its dispatch table) and
// the totals over the ranks that are up.
type LoadReport struct {
	Worker   int            `json:"worker"`
	InFlight int            `json:"in_flight"`
	Dispatch shard.Snapshot `json:"dispatch"`
	Totals   LoadTotals     `json:"totals"`
	// MissingRanks names each rank that has not reported or is down, with its address and
	// why (the same lines /health answers 503 with); empty when all are up.
	MissingRanks []string `json:"missing_ranks,omitempty"`
}

// LoadTotals sums the last reports of the ranks that are up.
type LoadTotals struct {
	Running          int   `json:"running"`
	Waiting          int   `json:"waiting"`
	KVTokensUsed     int64 `json:"kv_tokens_used"`
	KVTokensCapacity int64 `json:"kv_tokens_capacity"`
}

// ErrOverloaded is returned by Submit when the request queue is full (HTTP 503, Retry-After).
var ErrOverloaded = errors.New("server overloaded: request queue is full")

// BadRequestError is a client error (HTTP 400) with the reason.
type BadRequestError struct {
	Param string
	Msg   string
}

func (e *BadRequestError) Error() string {
	if e.Param != "" {
		return e.Param + ": " + e.Msg
	}
	return e.Msg
}

func badRequest(param, msg string) error { return &BadRequestError{Param: param, Msg: msg} }

// grammarRefusal is a 400 for a constraint the grammar compiler refused (malformed, or too
// costly to build or to mask). Its answer waits (see pauseRefusal).
type grammarRefusal struct{ bre *BadRequestError }

func (e *grammarRefusal) Error() string { return e.bre.Error() }

func (e *grammarRefusal) Unwrap() error { return e.bre }

func refuseGrammar(param, msg string) error {
	return &grammarRefusal{&BadRequestError{Param: param, Msg: msg}}
}
