package worker

// The worker's side of the wire: the only places where api and shard values become ipc values
// and back. Each request, output and load report crosses here once.

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmserve/llmserve/api"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/shard"
)

// RequestToWire converts a validated API request into the wire request sent to a rank: rid is
// the engine's id for it, owner the index of the worker that owns it and epoch that worker
// process's (see ipc.GenerateRequest.OwnerEpoch). A count that does not fit
// the wire's int32, or bounds that contradict each other, is a client error (*api.BadRequestError),
// never wrapped or clamped.
func RequestToWire(req *api.Request, rid string, owner int, epoch uint64, arrival time.Time) (ipc.GenerateRequest, error) {
	if err := checkCounts(req); err != nil {
		return ipc.GenerateRequest{}, err
	}
	kind, err := grammarKindToWire(req.GrammarKind)
	if err != nil {
		return ipc.GenerateRequest{}, err
	}
	pooling, err := poolingToWire(req.Pooling)
	if err != nil {
		return ipc.GenerateRequest{}, err
	}
	m := ipc.GenerateRequest{
		RID: rid, Owner: uint32(owner), OwnerEpoch: epoch, InputIDs: req.InputIDs,
		Sampling:     samplingToWire(&req.Sampling),
		MaxNewTokens: int32(req.MaxNewTokens), MinNewTokens: int32(req.MinNewTokens),
		StopTokenIDs: req.StopTokenIDs, StopStrings: req.StopStrings,
		IgnoreEOS: req.IgnoreEOS, SkipSpecialTokens: req.SkipSpecialTokens,
		Stream: req.Stream, NoText: req.NoText, StreamInterval: int32(req.StreamInterval), Logprobs: req.Logprobs,
		Grammar:    ipc.Grammar{Kind: kind, Spec: req.GrammarSpec},
		RoutedRank: int32(req.RoutedRank), ArrivalUnixNano: arrival.UnixNano(),
		TopLogprobs: int32(req.TopLogprobs), PromptLogprobs: req.PromptLogprobs, RequestID: req.RequestID,
		Priority: int32(req.Priority), Pooling: pooling,
	}
	if !req.Stream {
		// Non-streaming requests are sent whole at the end, not flushed every step.
		m.StreamInterval = int32(req.MaxNewTokens)
	}
	return m, nil
}

// checkCounts refuses the request's integer settings that the wire cannot carry exactly.
func checkCounts(req *api.Request) error {
	for _, c := range []struct {
		param string
		v     int
		min   int
	}{
		{"max_tokens", req.MaxNewTokens, 0},
		{"min_tokens", req.MinNewTokens, 0},
		{"stream_interval", req.StreamInterval, 0},
		{"top_k", req.Sampling.TopK, -1},
		{"routed_dp_rank", req.RoutedRank, -1},
	} {
		if c.v < c.min || c.v > math.MaxInt32 {
			return &api.BadRequestError{Param: c.param, Msg: fmt.Sprintf("must be in [%d, %d], got %d", c.min, math.MaxInt32, c.v)}
		}
	}
	if req.MinNewTokens > req.MaxNewTokens {
		return &api.BadRequestError{Param: "min_tokens", Msg: fmt.Sprintf("%d exceeds the maximum number of new tokens (%d)", req.MinNewTokens, req.MaxNewTokens)}
	}
	return nil
}

func samplingToWire(p *sampling.Params) ipc.Sampling {
	s := ipc.Sampling{
		Temperature: p.Temperature, TopP: p.TopP, MinP: p.MinP, RepetitionPenalty: p.RepetitionPenalty,
		FrequencyPenalty: p.FrequencyPenalty, PresencePenalty: p.PresencePenalty, TopK: int32(p.TopK),
	}
	if p.Seed != nil {
		s.Seed, s.HasSeed = *p.Seed, true
	}
	for _, b := range p.LogitBias {
		s.LogitBiasIDs = append(s.LogitBiasIDs, b.ID)
		s.LogitBiasValues = append(s.LogitBiasValues, b.Value)
	}
	return s
}

func poolingToWire(p api.Pooling) (ipc.Pooling, error) {
	switch p {
	case api.PoolingNone:
		return ipc.PoolingNone, nil
	case api.PoolingLast:
		return ipc.PoolingLast, nil
	case api.PoolingMean:
		return ipc.PoolingMean, nil
	case api.PoolingCLS:
		return ipc.PoolingCLS, nil
	}
	return 0, fmt.Errorf("unknown pooling %v", p)
}

func grammarKindToWire(k api.GrammarKind) (ipc.GrammarKind, error) {
	switch k {
	case api.GrammarNone:
		return ipc.GrammarNone, nil
	case api.GrammarJSONSchema:
		return ipc.GrammarJSONSchema, nil
	case api.GrammarJSONObject:
		return ipc.GrammarJSONObject, nil
	case api.GrammarRegex:
		return ipc.GrammarRegex, nil
	case api.GrammarCompose:
		return ipc.GrammarCompose, nil
	case api.GrammarGBNF:
		return ipc.GrammarGBNF, nil
	}
	return 0, fmt.Errorf("unknown grammar kind %d", k)
}

// GrammarSpec is an API constraint as the grammar package's spec (what a worker compiles to
// check a constraint up front): the API's kind is the grammar's, so only its range is checked.
func GrammarSpec(k api.GrammarKind, text string) (grammar.Spec, error) {
	if _, err := grammarKindToWire(k); err != nil {
		return grammar.Spec{}, err
	}
	return grammar.Spec{Kind: k, Text: text}, nil
}

// DeltaFromWire converts one output item into a delta for the request's stream. text is the
// item's text (from detokd, or from the worker's own detokenizer). The delta points into it.
func DeltaFromWire(it *ipc.TokenItem, text string) api.Delta {
	d := api.Delta{
		IDs: it.NewIDs, Text: text, Logprobs: it.Logprobs,
		TopLogprobIDs: it.TopLogprobIDs, TopLogprobs: it.TopLogprobs,
		PromptLogprobs: it.PromptLogprobs, PromptTopLogprobIDs: it.PromptTopLogprobIDs, PromptTopLogprobs: it.PromptTopLogprobs,
		PromptTokens: int(it.PromptTokens), CachedTokens: int(it.CachedTokens), CompletionTokens: int(it.CompletionTokens),
		Finished: it.Finished, FinishReason: finishReasonFromWire(it.FinishReason),
		Embedding: it.Embedding,
	}
	if it.Finished {
		d.QueueTime, d.PrefillTime, d.DecodeTime = time.Duration(it.QueueNanos), time.Duration(it.PrefillNanos), time.Duration(it.DecodeNanos)
		d.Preemptions = int(it.Preemptions)
		d.SpecDrafts, d.SpecDraftTokens = int(it.SpecDrafts), int(it.SpecDraftTokens)
		if len(it.SpecAccepted) > 0 {
			d.SpecAccepted = make([]int, len(it.SpecAccepted))
			for j, n := range it.SpecAccepted {
				d.SpecAccepted[j] = int(n)
			}
		}
		switch {
		case it.MatchedStop != "":
			d.MatchedStop = it.MatchedStop
		case it.MatchedStopToken >= 0 && it.FinishReason == ipc.FinishStop:
			d.MatchedStop = it.MatchedStopToken
		}
		if it.FinishReason == ipc.FinishError {
			d.Err = errorFromWire(it.ErrorKind, it.Error)
		}
	}
	return d
}

// errorFromWire is a failed item's error as the API takes it: the request's own fault is a
// *api.BadRequestError (a 400 with the rank's reason), anything else the engine's.
func errorFromWire(k ipc.ErrorKind, msg string) error {
	if k == ipc.ErrorInvalid {
		return &api.BadRequestError{Msg: msg}
	}
	return errors.New(msg)
}

func finishReasonFromWire(r ipc.FinishReason) api.FinishReason {
	switch r {
	case ipc.FinishStop:
		return api.FinishStop
	case ipc.FinishLength:
		return api.FinishLength
	case ipc.FinishAbort:
		return api.FinishAbort
	case ipc.FinishError:
		return api.FinishError
	}
	return api.FinishNone
}

// loadFromWire converts a rank's load report for the dispatcher of worker `self`, which reads
// its own acknowledgements out of the per-worker counters.
func loadFromWire(seq uint64, l *ipc.Load, self int) shard.Load {
	var recv, recvTokens uint64
	if self < len(l.Received) {
		recv = l.Received[self]
	}
	if self < len(l.ReceivedTokens) {
		recvTokens = l.ReceivedTokens[self]
	}
	var prios []shard.PriorityCount
	for _, c := range l.WaitingByPriority {
		prios = append(prios, shard.PriorityCount{Priority: int(c.Priority), Count: c.Count})
	}
	return shard.Load{Seq: seq, Running: int(l.Running), Waiting: int(l.Waiting),
		KVTokensUsed: l.KVTokensUsed, KVTokensCapacity: l.KVTokensCapacity, KVBlockSize: l.KVBlockSize, WaitingTokens: l.WaitingTokens,
		Received: recv, ReceivedTokens: recvTokens, ReceivedAll: l.Received, ReceivedTokensAll: l.ReceivedTokens,
		Preemptions: l.Preemptions, PrefixHitTokens: l.PrefixHitTokens,
		Steps: l.Steps, SpecDrafts: l.SpecDrafts, SpecDraftTokens: l.SpecDraftTokens, SpecAccepted: l.SpecAccepted,
		WaitingByPriority: prios, WaitingOtherPriority: l.WaitingOtherPriority}
}
