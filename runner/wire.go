package runner

// The rank's side of the wire: the only places where ipc values become scheduler and grammar
// values and back. Each request, output item and load report crosses here once.

import (
	"fmt"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
)

// request is one wire request as this rank takes it: the scheduler's request (without the
// stop-string check and constraint, which the runner attaches) and what the runner keeps beside
// it for the request's output.
type request struct {
	sched   scheduler.Request
	out     outputSettings
	grammar grammar.Spec
	// routedRank is the rank the client pinned the request to; -1 = any.
	routedRank int
	// ownerEpoch is the process of the owning worker that sent it.
	ownerEpoch uint64
}

// outputSettings are a request's settings for its output items: how often they go out, and
// the detokenization settings that ride on them (detokd never sees the request itself).
type outputSettings struct {
	stream      bool // false: everything goes out once, at the end
	interval    int  // tokens between stream outputs (>= 1)
	noText      bool
	skipSpecial bool
	stops       []string // sent with the first item only: detokd keeps them per request
	requestID   string   // the client's request id, sent with the first item only
}

// requestFromWire converts a decoded wire request. The result keeps m's slices (ipc's Decode
// copies out of the frame, and m is decoded fresh per message).
func requestFromWire(m *ipc.GenerateRequest) (request, error) {
	spec, err := grammarFromWire(m.Grammar)
	if err != nil {
		return request{}, err
	}
	pooling, err := poolingFromWire(m.Pooling)
	if err != nil {
		return request{}, err
	}
	return request{
		sched: scheduler.Request{
			RID: m.RID, Owner: int(m.Owner), InputIDs: m.InputIDs,
			MaxNewTokens: int(m.MaxNewTokens), MinNewTokens: int(m.MinNewTokens),
			StopTokenIDs: m.StopTokenIDs, IgnoreEOS: m.IgnoreEOS,
			Sampling: samplingFromWire(&m.Sampling), Logprobs: m.Logprobs, TopLogprobs: int(m.TopLogprobs), PromptLogprobs: m.PromptLogprobs, Arrival: time.Unix(0, m.ArrivalUnixNano),
			Priority: int(m.Priority), Pooling: pooling,
		},
		out: outputSettings{stream: m.Stream, interval: max(int(m.StreamInterval), 1), noText: m.NoText,
			skipSpecial: m.SkipSpecialTokens, stops: m.StopStrings, requestID: m.RequestID},
		grammar:    spec,
		routedRank: int(m.RoutedRank),
		ownerEpoch: m.OwnerEpoch,
	}, nil
}

func samplingFromWire(s *ipc.Sampling) sampling.Params {
	p := sampling.Params{Temperature: s.Temperature, TopP: s.TopP, TopK: int(s.TopK), MinP: s.MinP,
		RepetitionPenalty: s.RepetitionPenalty, FrequencyPenalty: s.FrequencyPenalty, PresencePenalty: s.PresencePenalty}
	if s.HasSeed {
		seed := s.Seed
		p.Seed = &seed
	}
	for i, id := range s.LogitBiasIDs {
		p.LogitBias = append(p.LogitBias, sampling.Bias{ID: id, Value: s.LogitBiasValues[i]})
	}
	return p
}

func poolingFromWire(p ipc.Pooling) (scheduler.Pooling, error) {
	switch p {
	case ipc.PoolingNone:
		return scheduler.PoolingNone, nil
	case ipc.PoolingLast:
		return scheduler.PoolingLast, nil
	case ipc.PoolingMean:
		return scheduler.PoolingMean, nil
	case ipc.PoolingCLS:
		return scheduler.PoolingCLS, nil
	}
	return 0, fmt.Errorf("unknown pooling %v", p)
}

func grammarFromWire(g ipc.Grammar) (grammar.Spec, error) {
	switch g.Kind {
	case ipc.GrammarNone:
		return grammar.Spec{Kind: grammar.KindNone, Text: g.Spec}, nil
	case ipc.GrammarJSONSchema:
		return grammar.Spec{Kind: grammar.KindJSONSchema, Text: g.Spec}, nil
	case ipc.GrammarJSONObject:
		return grammar.Spec{Kind: grammar.KindJSONObject, Text: g.Spec}, nil
	case ipc.GrammarRegex:
		return grammar.Spec{Kind: grammar.KindRegex, Text: g.Spec}, nil
	case ipc.GrammarCompose:
		return grammar.Spec{Kind: grammar.KindCompose, Text: g.Spec}, nil
	case ipc.GrammarGBNF:
		return grammar.Spec{Kind: grammar.KindGBNF, Text: g.Spec}, nil
	}
	return grammar.Spec{}, fmt.Errorf("unknown grammar kind %v", g.Kind)
}

// itemToWire converts one scheduler item whose output goes out now: ids and logprobs are what
// the stream gate releases (the step's own, or its buffer); first says whether it is the
// request's first item.
func itemToWire(it *scheduler.Item, ids []int32, logprobs []float32, top topLogprobs, out *outputSettings, first bool) ipc.TokenItem {
	ti := ipc.TokenItem{
		RID: it.RID, Owner: uint32(it.Owner), NewIDs: ids, Logprobs: logprobs,
		TopLogprobIDs: top.ids, TopLogprobs: top.logprobs,
		PromptLogprobs: it.PromptLogprobs, PromptTopLogprobIDs: it.PromptTopLogprobIDs, PromptTopLogprobs: it.PromptTopLogprobs,
		PromptTokens: int32(it.PromptTokens), CachedTokens: int32(it.CachedTokens), CompletionTokens: int32(it.CompletionTokens),
		Finished: it.Finished, FinishReason: finishReasonToWire(it.FinishReason),
		MatchedStopToken: it.MatchedStopToken, MatchedStop: it.MatchedStop, Error: it.Err, ErrorKind: errorKindToWire(it.ErrKind),
		NoText: out.noText, SkipSpecialTokens: out.skipSpecial,
		QueueNanos: int64(it.QueueTime), PrefillNanos: int64(it.PrefillTime), DecodeNanos: int64(it.DecodeTime),
		Preemptions: int32(it.Preemptions), Embedding: it.Embedding,
		SpecDrafts: int32(it.SpecDrafts), SpecDraftTokens: int32(it.SpecDraftTokens),
	}
	if it.Finished && len(it.SpecAccepted) > 0 {
		// At most scheduler.MaxDraftLimit positions, which ipc.MaxSpecPositions admits.
		ti.SpecAccepted = make([]int32, min(len(it.SpecAccepted), ipc.MaxSpecPositions))
		for j := range ti.SpecAccepted {
			ti.SpecAccepted[j] = int32(it.SpecAccepted[j])
		}
	}
	if first {
		ti.StopStrings, ti.RequestID = out.stops, out.requestID
	}
	return ti
}

// topLogprobs are the top-logprob entries of an item's ids (k per id, flattened).
type topLogprobs struct {
	ids      []int32
	logprobs []float32
}

func finishReasonToWire(r scheduler.FinishReason) ipc.FinishReason {
	switch r {
	case scheduler.FinishStop:
		return ipc.FinishStop
	case scheduler.FinishLength:
		return ipc.FinishLength
	case scheduler.FinishAbort:
		return ipc.FinishAbort
	case scheduler.FinishError:
		return ipc.FinishError
	}
	return ipc.FinishNone
}

func errorKindToWire(k scheduler.ErrorKind) ipc.ErrorKind {
	if k == scheduler.ErrorInvalid {
		return ipc.ErrorInvalid
	}
	return ipc.ErrorInternal
}

// loadToWire fills dst with the rank's report: the scheduler's last load plus the requests read
// off the socket that the scheduler has not taken yet (queued), and the per-worker receipt
// counters. dst's slices are reused.
func loadToWire(dst *ipc.Load, sl *scheduler.Load, queued, queuedTokens int, received, receivedTokens []uint64) {
	prios := dst.WaitingByPriority
	*dst = ipc.Load{Running: int64(sl.Running), Waiting: int64(sl.Waiting + queued),
		KVTokensUsed: int64(sl.KVTokensUsed), KVTokensCapacity: int64(sl.KVTokensCapacity), KVBlockSize: int64(sl.KVBlockSize),
		WaitingTokens: int64(sl.WaitingTokens + queuedTokens),
		Received:      append(dst.Received[:0], received...), ReceivedTokens: append(dst.ReceivedTokens[:0], receivedTokens...),
		Preemptions: uint64(sl.Stats.Preemptions), PrefixHitTokens: uint64(sl.Stats.PrefixHitTokens),
		Steps: uint64(sl.Stats.Steps), SpecDrafts: uint64(sl.Stats.Drafts),
		SpecDraftTokens: uint64(sl.Stats.DraftTokens), SpecAccepted: uint64(sl.Stats.AcceptedTokens),
		WaitingByPriority: prios[:0], WaitingOtherPriority: int64(sl.WaitingOtherPriority)}
	for i, c := range sl.WaitingByPriority {
		if i >= ipc.MaxPriorityCounts { // the wire's bound, should the scheduler's ever be larger
			dst.WaitingOtherPriority += int64(c.Count)
			continue
		}
		dst.WaitingByPriority = append(dst.WaitingByPriority, ipc.PriorityCount{Priority: int32(c.Priority), Count: int64(c.Count)})
	}
}
