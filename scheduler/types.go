package scheduler

import (
	"fmt"
	"time"

	"github.com/llmserve/llmserve/sampling"
)

// FinishReason says why a request stopped. The values equal ipc.FinishReason's, so the binary
// converts one into the other with a plain conversion.
type FinishReason uint8

// Finish reasons.
const (
	FinishNone   FinishReason = 0 // still running
	FinishStop   FinishReason = 1 // EOS, stop token, stop string, or the constraint terminated
	FinishLength FinishReason = 2 // MaxNewTokens or the context length reached
	FinishAbort  FinishReason = 3 // Abort was called
	FinishError  FinishReason = 4 // see Item.Err
)

func (r FinishReason) String() string {
	switch r {
	case FinishNone:
		return "none"
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

// Constraint restricts which tokens a request may generate (a compiled grammar's matcher).
// FillMask runs on its own goroutine while the forward step runs, so it must only read the
// state that Accept changes; the scheduler never calls two methods of one Constraint at once.
// A Constraint may also have an `Err() error` method: a non-nil error (its compile failed, a mask
// was given up) fails the request with it, as the request's own fault when it is a
// *RequestError of ErrorInvalid (the client's grammar), else as the engine's.
type Constraint interface {
	// FillMask writes the tokens allowed next into dst (bit i%64 of dst[i/64] set = token i
	// allowed); dst has one bit per vocabulary entry and arrives zeroed. The scheduler decides
	// the EOS bits itself, from CanTerminate.
	FillMask(dst []uint64)
	// Accept advances past the generated token; an error means the token was not allowed.
	Accept(tok int32) error
	// CanTerminate reports whether the output so far is complete, so EOS may end it.
	CanTerminate() bool
	// IsTerminated reports whether nothing more can follow, so the request stops now.
	IsTerminated() bool
}

// DraftConstraint is an optional capability of a Constraint that speculative decoding uses:
// jump-forward drafts where the grammar admits exactly one continuation, and drafts cut where
// the grammar refuses them. Both leave the constraint's state as they found it.
type DraftConstraint interface {
	Constraint
	// ForcedTokens appends to dst at most max tokens that spell the bytes the constraint admits
	// as the only continuation from here; it appends nothing when there is a choice.
	ForcedTokens(dst []int32, max int) []int32
	// Admits reports how many leading tokens of toks the constraint accepts one after another.
	Admits(toks []int32) int
}

// Request is one generation request as the scheduler sees it (the binary converts wire
// messages into it). The scheduler keeps the pointer; the caller must not change the request
// after Add.
type Request struct {
	// RID identifies the request; unique among live requests.
	RID string
	// Owner is the tokenizer worker that owns the request, copied into every Item.
	Owner int
	// InputIDs is the prompt (at least one token).
	InputIDs []int32
	// MaxNewTokens bounds the generated tokens; 0 finishes at once with FinishLength.
	MaxNewTokens int
	// MinNewTokens is how many tokens are generated before EOS, stop token ids or stop strings
	// may end the request; EOS and stop ids are masked out until then.
	MinNewTokens int
	// StopTokenIDs end the request when generated (they are not subject to IgnoreEOS).
	StopTokenIDs []int32
	// IgnoreEOS keeps generating past the model's EOS ids.
	IgnoreEOS bool
	// Sampling must pass Validate.
	Sampling sampling.Params
	// Constraint, when set, masks the logits before every sample; nil is unconstrained.
	Constraint Constraint
	// Ready, when set, reports whether Constraint has finished compiling; the request waits
	// (is not admitted into a batch) until it returns true.
	Ready func() bool
	// StopCheck, when set, is called with each step's new token ids (deltas, in order) and
	// reports a matched stop string; the binary supplies it so the scheduler stays
	// tokenizer-free.
	StopCheck func(ids []int32) (matched string, ok bool)
	// Logprobs asks for the log probability of every generated token under the raw logits.
	Logprobs bool
	// TopLogprobs asks for that many most likely tokens (and their raw logprobs) at every
	// generated position; 0 for none.
	TopLogprobs int
	// PromptLogprobs asks for the logprob of every prompt token after the first (and its
	// TopLogprobs most likely tokens), computed without the prefix cache.
	PromptLogprobs bool
	// Arrival is when the request reached the engine, carried for metrics; the queue is served
	// in the order of Add.
	Arrival time.Time
	// Received is when the request reached this rank, where its queue time starts; zero means
	// at Add.
	Received time.Time
	// Priority orders the queue under PolicyPriority, as vLLM's priority field: lower runs
	// first, equal priorities in the order of Add. PolicyFCFS ignores it.
	Priority int
	// Pooling, when set, makes this an embedding request (embed.go): its prompt is run without
	// sampling and its item carries the pooled final hidden state. MaxNewTokens must be 0.
	Pooling Pooling
}

// Item is one request's output of one step: the tokens it generated in that step (deltas), or
// its finish.
type Item struct {
	RID   string
	Owner int
	// NewIDs are the ids generated in this step only.
	NewIDs []int32
	// Logprobs holds one log probability per NewIDs entry when the request asked for them.
	Logprobs []float32
	// TopLogprobIDs and TopLogprobs hold Request.TopLogprobs entries per NewIDs entry, most
	// likely first, when the request asked for them.
	TopLogprobIDs []int32
	TopLogprobs   []float32
	// PromptLogprobs (prompt tokens 1.., in order) and their top entries (TopLogprobs per
	// position, flattened) ride on the request's first item when it asked for them.
	PromptLogprobs      []float32
	PromptTopLogprobIDs []int32
	PromptTopLogprobs   []float32
	// PromptTokens is the prompt length; CachedTokens how much of it a prefix match supplied on
	// first admission; CompletionTokens the ids generated so far, NewIDs included.
	PromptTokens     int
	CachedTokens     int
	CompletionTokens int
	Finished         bool
	FinishReason     FinishReason
	// MatchedStopToken is the EOS or stop token id that finished the request; -1 when none.
	MatchedStopToken int32
	// MatchedStop is the stop string that finished the request.
	MatchedStop string
	// Err says what went wrong when FinishReason is FinishError.
	Err string
	// ErrKind says whose fault Err is (see Refusal).
	ErrKind ErrorKind
	// QueueTime, PrefillTime and DecodeTime are set on a finished item: the time from reaching
	// the rank to first being scheduled, from then to the first token, and from the first token
	// to the finish (vLLM's request_queue/prefill/decode_time). A phase never reached is zero.
	QueueTime, PrefillTime, DecodeTime time.Duration
	// Preemptions is, on a finished item, how many times the request was evicted from the batch
	// to free KV blocks.
	Preemptions int
	// SpecDrafts, SpecDraftTokens and SpecAccepted are, on a finished item, the request's
	// speculative verifications (steps with at least one draft token), the draft tokens they
	// verified, and the drafts accepted at each draft position (SpecAccepted[j] counts the
	// verifications whose draft token j was accepted; nil when none was). Their sum over
	// requests is vLLM's spec_decode_* counters.
	SpecDrafts, SpecDraftTokens int
	SpecAccepted                []int
	// Embedding is an embedding request's pooled final hidden state (not normalized), on its
	// finishing item.
	Embedding []float32
}

// Load is the rank's load, piggybacked on every output.
type Load struct {
	Running, Waiting int
	// KVTokensUsed counts the positions of KV blocks referenced by live requests (cached
	// prefixes that nothing references are reusable and not counted).
	KVTokensUsed     int
	KVTokensCapacity int
	// KVBlockSize is the positions of one KV block (/metrics' vllm:cache_config_info).
	KVBlockSize int
	// WaitingTokens is the positions queued requests still need computed (they hold no KV).
	WaitingTokens int
	// Stats are the event counters so far, reported with the load for /metrics.
	Stats Stats
	// WaitingByPriority counts the waiting requests of each priority value, most urgent (lowest)
	// first, for at most MaxPriorityGauges values; WaitingOtherPriority counts the waiting
	// requests of every value after those (so /metrics has a bounded set of series).
	WaitingByPriority    []PriorityCount
	WaitingOtherPriority int
}

// MaxPriorityGauges bounds Load.WaitingByPriority: a client chooses its priority value, so the
// rank reports the most urgent values and sums the rest.
const MaxPriorityGauges = 8

// PriorityCount is the number of waiting requests of one priority value.
type PriorityCount struct {
	Priority int
	Count    int
}

// Output is what one Step produced: an Item for every request that generated a token or
// finished, and the load after the step. The slices are reused by the next Step: consume or copy
// them before calling Step again.
type Output struct {
	Items []Item
	Load  Load
	// KVEvents are the prefix cache's changes since the previous Output, oldest first, when
	// Config.KVEvents is set. Unlike Items they are not reused: the caller owns them.
	KVEvents []KVEvent
}

// KVEventKind says what a KVEvent reports.
type KVEventKind uint8

// The kinds of KV events, named as vLLM's.
const (
	// KVBlockStored: full blocks joined the prefix cache (reusable by later requests).
	KVBlockStored KVEventKind = iota + 1
	// KVBlockRemoved: blocks left the prefix cache (evicted for new KV).
	KVBlockRemoved
	// KVAllBlocksCleared: the whole cache was emptied.
	KVAllBlocksCleared
)

// KVEvent is one change to a rank's prefix cache, with block hashes of vLLM's sha256_cbor
// scheme (see KVBlockHash.External), so an indexer of vLLM's events can index ours.
type KVEvent struct {
	Kind KVEventKind
	// Hashes are the blocks stored (in prefix order) or removed.
	Hashes []uint64
	// Parent is the hash of the block before the first stored one, when HasParent; a chain
	// that starts a sequence has none.
	Parent    uint64
	HasParent bool
	// Tokens are the stored blocks' token ids, block size ids per hash.
	Tokens []int32
}

// Stats counts scheduler events since New.
type Stats struct {
	// Steps counts forward steps run; BatchTokens the tokens they carried.
	Steps, BatchTokens int
	// Preemptions counts requests evicted from the running batch to free KV blocks.
	Preemptions int
	// PrefixHitTokens counts prompt positions supplied by prefix matches (re-admissions of
	// preempted requests included).
	PrefixHitTokens int
	// DraftTokens counts the speculative draft tokens verified, and AcceptedTokens those of
	// them the target model's picks matched (vLLM's spec_decode_num_draft_tokens_total and
	// num_accepted_tokens_total).
	DraftTokens, AcceptedTokens int
	// Drafts counts the verifications those draft tokens came in: one per request and step
	// with at least one draft token (vLLM's spec_decode_num_drafts_total).
	Drafts int
}
