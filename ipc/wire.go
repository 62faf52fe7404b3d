package ipc

import "fmt"

// WireVersion is the first byte of every frame. Bump it on any incompatible layout change;
// decoders refuse frames of any other version.
const WireVersion byte = 16

// MsgType is the second byte of every frame.
type MsgType uint8

// The message types on the wire.
const (
	MsgGenerateRequest MsgType = 1 // tokenizerd -> schedulerd
	MsgAbort           MsgType = 2 // tokenizerd -> schedulerd
	MsgTokenBatch      MsgType = 3 // schedulerd -> detokd (or -> tokenizerd when detokd is skipped)
	MsgTextBatch       MsgType = 4 // detokd -> tokenizerd
	MsgHoldQuery       MsgType = 5 // tokenizerd -> schedulerd
)

func (t MsgType) String() string {
	switch t {
	case MsgGenerateRequest:
		return "GenerateRequest"
	case MsgAbort:
		return "Abort"
	case MsgTokenBatch:
		return "TokenBatch"
	case MsgTextBatch:
		return "TextBatch"
	case MsgHoldQuery:
		return "HoldQuery"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Message is implemented by every wire type.
type Message interface {
	// Type says which MsgType the encoding carries.
	Type() MsgType
	// Append appends the complete frame (version, type, body) to dst and returns it.
	Append(dst []byte) []byte
	// Decode replaces the receiver's content with the frame's, reusing its slices. On error
	// the receiver holds partial content and must not be used.
	Decode(frame []byte) error
}

// GrammarKind says how GenerateRequest.Grammar.Spec is to be read.
type GrammarKind uint8

// Grammar kinds.
const (
	GrammarNone       GrammarKind = 0
	GrammarJSONSchema GrammarKind = 1 // Spec is a JSON Schema document
	GrammarJSONObject GrammarKind = 2 // any JSON object; Spec is empty
	GrammarRegex      GrammarKind = 3 // Spec is a regular expression
	GrammarCompose    GrammarKind = 4 // Spec is a composed grammar (grammar.Part as JSON)
	GrammarGBNF       GrammarKind = 5 // Spec is a grammar in llama.cpp's GBNF syntax
)

const maxGrammarKind = GrammarGBNF

func (k GrammarKind) String() string {
	switch k {
	case GrammarNone:
		return "none"
	case GrammarJSONSchema:
		return "json_schema"
	case GrammarJSONObject:
		return "json_object"
	case GrammarRegex:
		return "regex"
	case GrammarCompose:
		return "compose"
	case GrammarGBNF:
		return "gbnf"
	}
	return fmt.Sprintf("GrammarKind(%d)", uint8(k))
}

// Grammar constrains decoding; Kind GrammarNone means unconstrained.
type Grammar struct {
	Kind GrammarKind
	Spec string
}

// FinishReason says why a request stopped.
type FinishReason uint8

// Finish reasons.
const (
	FinishNone   FinishReason = 0 // still running
	FinishStop   FinishReason = 1 // EOS, stop token or stop string
	FinishLength FinishReason = 2 // MaxNewTokens or context length reached
	FinishAbort  FinishReason = 3 // client went away or Abort received
	FinishError  FinishReason = 4 // see TokenItem.Error
)

const maxFinishReason = FinishError

func (r FinishReason) String() string {
	switch r {
	case FinishNone:
		return ""
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishAbort:
		return "abort"
	case FinishError:
		return "error"
	}
	return fmt.Sprintf("FinishReason(%d)", uint8(r))
}

// ErrorKind says whose fault a failed request is (TokenItem.Error), and so what its client is
// answered: the one place this is decided is where the request is refused.
type ErrorKind uint8

// Error kinds.
const (
	ErrorInternal ErrorKind = 0 // the engine's fault (a forward failed, output was lost): HTTP 500
	ErrorInvalid  ErrorKind = 1 // the request's own: the engine will not serve it as sent (HTTP 400)
)

const maxErrorKind = ErrorInvalid

func (k ErrorKind) String() string {
	switch k {
	case ErrorInternal:
		return "internal"
	case ErrorInvalid:
		return "invalid"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

// Pooling makes a GenerateRequest an embedding request and says how its prompt's final hidden
// states become one vector.
type Pooling uint8

// Pooling modes.
const (
	PoolingNone Pooling = 0 // a generation request
	PoolingLast Pooling = 1 // the last prompt token's state
	PoolingMean Pooling = 2 // the mean over the prompt's tokens
	PoolingCLS  Pooling = 3 // the first prompt token's state
)

const maxPooling = PoolingCLS

func (p Pooling) String() string {
	switch p {
	case PoolingNone:
		return "none"
	case PoolingLast:
		return "last"
	case PoolingMean:
		return "mean"
	case PoolingCLS:
		return "cls"
	}
	return fmt.Sprintf("Pooling(%d)", uint8(p))
}

// Sampling is a request's sampling settings (sampling.Params on the wire); it travels as one
// block so a new setting is added in one place on each side.
type Sampling struct {
	Temperature       float32
	TopP              float32
	MinP              float32
	RepetitionPenalty float32
	FrequencyPenalty  float32
	PresencePenalty   float32
	TopK              int32
	Seed              uint64
	HasSeed           bool // Seed is set; without it the rank draws a fresh seed
	// LogitBiasIDs[i] gets LogitBiasValues[i] added to its logit (sampling.Bias).
	LogitBiasIDs    []int32
	LogitBiasValues []float32
}

// GenerateRequest is one tokenized request, sent by the tokenizer worker that owns it to the
// scheduler of the rank it was dispatched to.
type GenerateRequest struct {
	RID   string
	Owner uint32 // index of the tokenizer worker that owns the request
	// OwnerEpoch identifies the process of worker Owner that sent the request (drawn at its
	// start), so a rank can tell a crashed predecessor's requests from its successor's.
	OwnerEpoch uint64
	InputIDs   []int32

	Sampling Sampling

	MaxNewTokens int32
	MinNewTokens int32
	StopTokenIDs []int32
	StopStrings  []string

	IgnoreEOS         bool
	SkipSpecialTokens bool
	Stream            bool
	NoText            bool  // the client wants ids only: nothing detokenizes this request
	StreamInterval    int32 // tokens between stream outputs (>= 1)
	Logprobs          bool

	Grammar         Grammar
	RoutedRank      int32 // DP rank the request must run on; -1 = any
	ArrivalUnixNano int64
	// TopLogprobs is how many most likely tokens to report with each generated token (0-20).
	TopLogprobs int32
	// PromptLogprobs asks for the prompt tokens' logprobs (and TopLogprobs entries each).
	PromptLogprobs bool
	// RequestID is the client's X-Request-Id (or the worker's own), for the rank's log lines.
	RequestID string
	// Priority orders the rank's queue under its priority policy (lower first).
	Priority int32
	// Pooling, when set, makes this an embedding request: its prompt runs with no sampling and
	// its only item carries the pooled vector (TokenItem.Embedding).
	Pooling Pooling
}

// Abort cancels a request at the scheduler that runs it. An empty RID (never a request's)
// cancels every request of Owner from an epoch other than OwnerEpoch, now and when they arrive
// later: a worker's process sends it at its start, for whatever a crashed predecessor left.
type Abort struct {
	RID        string
	Owner      uint32
	OwnerEpoch uint64
	Reason     string
}

// HoldQuery asks a scheduler which of a worker's requests it no longer holds: for each of RIDs it
// has neither running, waiting nor queued, it sends a finishing error item (Owner's). A worker
// sends one when detokd restarts, for the requests it still waits for on that rank: one whose
// finishing item died with the old detokd would otherwise wait forever, since no later item
// reveals the loss. The rank's outputs reach the worker in order, so a real finishing item sent
// before the query was read arrives first and the answer finds the request gone.
type HoldQuery struct {
	Owner uint32
	RIDs  []string
}

// Load is a rank's load report, piggybacked on every output batch.
type Load struct {
	Running          int64 // requests in the running batch
	Waiting          int64 // requests queued
	KVTokensUsed     int64
	KVTokensCapacity int64
	// KVBlockSize is the positions of one of the rank's KV blocks.
	KVBlockSize int64
	// Received[w] counts the GenerateRequests this rank has received from tokenizer worker w
	// so far, so a dispatcher can subtract what the rank has acknowledged from what it sent.
	Received []uint64
	// WaitingTokens is the prompt tokens of queued requests, which hold no KV yet.
	WaitingTokens int64
	// ReceivedTokens[w] is the prompt tokens of those requests, so token-weighted dispatch
	// can subtract them too.
	ReceivedTokens []uint64
	// Preemptions and PrefixHitTokens are the rank's cumulative scheduler counters
	// (scheduler.Stats), shown on /metrics.
	Preemptions     uint64
	PrefixHitTokens uint64
	// Steps counts the rank's forward steps; SpecDrafts, SpecDraftTokens and SpecAccepted its
	// speculative verifications, the draft tokens they verified and those accepted (cumulative
	// scheduler.Stats, shown per rank on /metrics: tokens per forward pass is what speculation
	// buys).
	Steps, SpecDrafts, SpecDraftTokens, SpecAccepted uint64
	// WaitingByPriority counts the scheduler's waiting requests per priority value, lowest
	// first, at most MaxPriorityCounts values; WaitingOtherPriority counts those of every
	// value after them (per-priority queue gauges on /metrics).
	WaitingByPriority    []PriorityCount
	WaitingOtherPriority int64
	// Go is the rank process's Go runtime stats (the go_* series on /metrics).
	Go GoStats
}

// GoStats is a process's Go runtime stats, as runtime/metrics reads them (at most once a second:
// they ride on every load report). It has metrics.GoRuntime's fields, so that one converts to
// the other. An empty GoVersion means no stats.
type GoStats struct {
	// Goroutines is the number of live goroutines; GOMAXPROCS the runtime's setting.
	Goroutines, GOMAXPROCS uint64
	// HeapAllocBytes is the bytes of live and not yet swept heap objects; HeapInuseBytes adds
	// the unused space of the heap's in-use spans; SysBytes is all memory mapped by the runtime.
	HeapAllocBytes, HeapInuseBytes, SysBytes uint64
	// HeapGoalBytes is the heap size the current GC cycle aims at.
	HeapGoalBytes uint64
	// GCCycles counts completed GC cycles; GCPauseSeconds is their stop-the-world pauses' total
	// (estimated from runtime/metrics' pause histogram).
	GCCycles       uint64
	GCPauseSeconds float64
	// GoVersion is the Go release the process was built with (runtime.Version()).
	GoVersion string
}

// MaxGoVersionLen bounds GoStats.GoVersion (a decoder refuses longer).
const MaxGoVersionLen = 64

// MaxSpecPositions bounds TokenItem.SpecAccepted (a decoder refuses more): the longest draft
// a rank may verify (scheduler.MaxDraftLimit).
const MaxSpecPositions = 64

// MaxPriorityCounts bounds Load.WaitingByPriority (a decoder refuses more).
const MaxPriorityCounts = 8

// PriorityCount is the number of waiting requests of one priority value.
type PriorityCount struct {
	Priority int32
	Count    int64
}

// TokenItem is one request's new output in a batch.
type TokenItem struct {
	RID              string
	Owner            uint32
	NewIDs           []int32   // token ids generated since this request's previous item
	Logprobs         []float32 // logprob of each NewIDs entry, when requested; else empty
	PromptTokens     int32
	CachedTokens     int32
	CompletionTokens int32 // total generated so far, including NewIDs
	Finished         bool
	FinishReason     FinishReason
	MatchedStopToken int32 // the stop token id that finished the request; -1 = none
	MatchedStop      string
	Error            string
	// ErrorKind says whose fault Error is (ErrorInternal without one).
	ErrorKind ErrorKind

	// Detokenization settings, for detokd, which never sees the GenerateRequest. The flags ride
	// on every item; StopStrings need only be sent with a request's first item, since detokd
	// keeps them in its per-request state.
	NoText            bool
	SkipSpecialTokens bool
	StopStrings       []string

	// TopLogprobIDs and TopLogprobs hold, for each NewIDs entry in order, the request's k most
	// likely tokens and their logprobs (k = len(TopLogprobIDs) / len(NewIDs)); else empty.
	TopLogprobIDs []int32
	TopLogprobs   []float32
	// PromptLogprobs holds the logprob of each prompt token after the first, and
	// PromptTopLogprobIDs / PromptTopLogprobs their top entries (k per position); sent once,
	// with the request's first item, when asked for.
	PromptLogprobs      []float32
	PromptTopLogprobIDs []int32
	PromptTopLogprobs   []float32

	// RequestID is the client's request id, sent with a request's first item only (detokd
	// keeps it for its log lines, as it keeps StopStrings).
	RequestID string
	// QueueNanos, PrefillNanos and DecodeNanos are the rank's times of a finished request
	// (reaching the rank to first scheduled, to the first token, to the finish); they travel
	// only on the finishing item.
	QueueNanos, PrefillNanos, DecodeNanos int64
	// Preemptions is how many times the rank evicted the finished request to free KV blocks.
	Preemptions int32
	// SpecDrafts, SpecDraftTokens and SpecAccepted are the finished request's speculative
	// verifications (steps with drafts), the draft tokens they verified and the drafts accepted
	// at each draft position (at most MaxSpecPositions); finishing item only, like the times.
	SpecDrafts, SpecDraftTokens int32
	SpecAccepted                []int32
	// Embedding is an embedding request's pooled final hidden state (not normalized), on its
	// finishing item; else empty.
	Embedding []float32
}

// TokenBatch is what a scheduler sends after a step: the new token ids of every request that
// produced output, and its load. A TokenBatch with no Items is a heartbeat.
type TokenBatch struct {
	Rank  uint32
	Seq   uint64 // monotonic per rank
	Load  Load
	Items []TokenItem
}

// TextItem is a TokenItem with its text delta, as detokd forwards it.
type TextItem struct {
	TokenItem
	Text string // text decoded since this request's previous item
}

// RankLoad is one rank's load report as forwarded by detokd.
type RankLoad struct {
	Rank uint32
	Seq  uint64
	Load Load
}

// TextBatch is what detokd sends to one tokenizer worker: the items that worker owns and the
// loads of the ranks whose batches it processed (also when they carried no items for it).
type TextBatch struct {
	// Epoch names the detokd process that sent the batch (random, nonzero, drawn at its
	// start): a worker that sees it change knows a detokd died and may have taken the output
	// of the requests it was streaming, final items included, with it.
	Epoch uint64
	Loads []RankLoad
	Items []TextItem
	// Detok is detokd's own Go runtime stats.
	Detok GoStats
}

// Type implements Message.
func (*GenerateRequest) Type() MsgType { return MsgGenerateRequest }

// Type implements Message.
func (*Abort) Type() MsgType { return MsgAbort }

// Type implements Message.
func (*HoldQuery) Type() MsgType { return MsgHoldQuery }

// Type implements Message.
func (*TokenBatch) Type() MsgType { return MsgTokenBatch }

// Type implements Message.
func (*TextBatch) Type() MsgType { return MsgTextBatch }
