package api

import (
	"slices"
	"strconv"
	"time"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/scheduler"
)

// serverMetrics are the API's request metrics. The families a vLLM dashboard queries keep vLLM's
// names (vllm:*) and its model_name label, so its published Grafana dashboard and tools that
// route on those series work unchanged; what vLLM has no name for is llm_*. With a shared
// registry (metrics.Shared) every series is the engine's total, whichever worker is scraped.
type serverMetrics struct {
	requests    map[string]*metrics.Counter // by endpoint
	disconnects *metrics.Counter
	promptTok   *metrics.Counter
	genTok      *metrics.Counter
	ttft        *metrics.Histogram
	tpot        *metrics.Histogram
	itl         *metrics.Histogram // between streamed chunks, per token
	e2e         *metrics.Histogram
	queue       *metrics.Histogram
	prefill     *metrics.Histogram
	decode      *metrics.Histogram
	promptLen   *metrics.Histogram
	// prefixQueries and prefixHits are prompt tokens of finished requests and those of them a
	// rank's prefix cache supplied (vLLM's prefix_cache_queries/hits, in tokens).
	prefixQueries, prefixHits *metrics.Counter
	// preemptions counts the evictions of finished requests (vLLM counts them as they happen;
	// here they arrive with the finish, which keeps the sum exact across workers and rank
	// restarts).
	preemptions *metrics.Counter
	// specDrafts, specDraftTokens and specAccepted count finished requests' speculative
	// verifications, the draft tokens they verified and those accepted; specAcceptedPos the
	// accepted ones by draft position (vLLM's spec_decode_* counters; here they arrive with the
	// finish, as preemptions do). Every position a rank may verify has its series up front.
	specDrafts, specDraftTokens, specAccepted *metrics.Counter
	specAcceptedPos                           []*metrics.Counter
	// coalesced counts outputs merged into a larger SSE chunk because the client's stream
	// had not taken the previous one yet.
	coalesced *metrics.Counter
	// preprocess is arrival to dispatch (body decode, chat template, tokenization, grammar
	// check); grammarCheck is the worker's grammar compile (or cache lookup) per constraint.
	preprocess, grammarCheck *metrics.Histogram
	genLen                   *metrics.Histogram
	maxGenLen                *metrics.Histogram
	// success is by finish reason; errors by HTTP status (errorStatuses, others under "other").
	// Every series is registered up front: a shared registry's layout is fixed once sealed.
	success     map[string]*metrics.Counter
	errors      map[int]*metrics.Counter
	otherErrors *metrics.Counter
}

// tokenBuckets suit request lengths in tokens (vLLM's 1-2-5 series).
var tokenBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}

// errorStatuses are the statuses the API answers errors with, each its own series.
var errorStatuses = []int{400, 401, 404, 405, 408, 413, 429, 500, 503, 504}

func newServerMetrics(reg *metrics.Registry, model string) *serverMetrics {
	ml := metrics.Labels{{"model_name", model}}
	m := &serverMetrics{requests: map[string]*metrics.Counter{}, success: map[string]*metrics.Counter{},
		errors: map[int]*metrics.Counter{}}
	for _, ep := range []string{"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings", "/generate", "/tokenize", "/detokenize"} {
		m.requests[ep] = reg.NewCounter("llm_requests_total", "Requests received, by endpoint.",
			append(metrics.Labels{{"endpoint", ep}}, ml...))
	}
	for _, st := range errorStatuses {
		m.errors[st] = reg.NewCounter("llm_request_errors_total", "Requests answered with an error, by HTTP status.",
			append(metrics.Labels{{"status", strconv.Itoa(st)}}, ml...))
	}
	m.otherErrors = reg.NewCounter("llm_request_errors_total", "Requests answered with an error, by HTTP status.",
		append(metrics.Labels{{"status", "other"}}, ml...))
	m.disconnects = reg.NewCounter("llm_client_disconnects_total", "Requests aborted because the client went away.", ml)
	m.promptTok = reg.NewCounter("vllm:prompt_tokens_total", "Prompt tokens of finished requests.", ml)
	m.genTok = reg.NewCounter("vllm:generation_tokens_total", "Tokens generated for finished requests.", ml)
	// by the engine's finish reason, as vLLM labels it: a request that ends in tool calls
	// stopped (its response says "tool_calls"; vLLM's engine, like this one, counts a stop)
	for _, r := range []string{FinishStop.String(), FinishLength.String(), FinishAbort.String(), FinishError.String()} {
		m.success[r] = reg.NewCounter("vllm:request_success_total", "Finished requests, by finish reason.",
			append(metrics.Labels{{"finished_reason", r}}, ml...))
	}
	lat := func(name, help string) *metrics.Histogram {
		return reg.NewHistogram(name, help, ml, metrics.LatencyBuckets)
	}
	m.ttft = lat("vllm:time_to_first_token_seconds", "Arrival to the first generated token, every request.")
	m.tpot = lat("vllm:time_per_output_token_seconds", "Mean time per output token after the first, per request.")
	m.e2e = lat("vllm:e2e_request_latency_seconds", "Arrival to finish, every request.")
	m.queue = lat("vllm:request_queue_time_seconds", "Time a request waited at its rank before it was scheduled.")
	m.prefill = lat("vllm:request_prefill_time_seconds", "From scheduling to the first token at the rank.")
	m.decode = lat("vllm:request_decode_time_seconds", "From the first token to the finish at the rank.")
	m.itl = lat("llm_inter_token_latency_seconds", "Time between streamed chunks, per token.")
	m.prefixQueries = reg.NewCounter("vllm:prefix_cache_queries_total", "Prompt tokens of finished requests, looked up in the ranks' prefix caches.", ml)
	m.prefixHits = reg.NewCounter("vllm:prefix_cache_hits_total", "Prompt tokens of finished requests that the ranks' prefix caches supplied.", ml)
	m.preemptions = reg.NewCounter("vllm:num_preemptions_total", "Times the ranks evicted a request from the batch to free KV blocks (counted at its finish).", ml)
	m.specDrafts = reg.NewCounter("vllm:spec_decode_num_drafts_total", "Speculative verifications: one per request and step with draft tokens (counted at its finish).", ml)
	m.specDraftTokens = reg.NewCounter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens verified (counted at the request's finish).", ml)
	m.specAccepted = reg.NewCounter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted (counted at the request's finish).", ml)
	for j := range scheduler.MaxDraftLimit {
		m.specAcceptedPos = append(m.specAcceptedPos, reg.NewCounter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
			"Draft tokens accepted, by position in their draft (0 first; counted at the request's finish).",
			append(slices.Clone(ml), [2]string{"position", strconv.Itoa(j)})))
	}
	m.coalesced = reg.NewCounter("llm_stream_chunks_coalesced_total", "Outputs merged into a larger streamed chunk because the client had not taken the previous one.", ml)
	m.preprocess = lat("llm_request_preprocess_seconds", "Arrival to dispatch: body decode, chat template, tokenization and grammar check.")
	m.grammarCheck = lat("llm_grammar_check_seconds", "A worker's compile of a request's constraint (a cache hit takes microseconds).")
	m.promptLen = reg.NewHistogram("vllm:request_prompt_tokens", "Prompt tokens per request.", ml, tokenBuckets)
	m.genLen = reg.NewHistogram("vllm:request_generation_tokens", "Generated tokens per request.", ml, tokenBuckets)
	m.maxGenLen = reg.NewHistogram("vllm:request_max_num_generation_tokens",
		"The most tokens any sequence of a request generated.", ml, tokenBuckets)
	return m
}

// errorCounter returns the counter of answers with HTTP status st.
func (m *serverMetrics) errorCounter(st int) *metrics.Counter {
	if c := m.errors[st]; c != nil {
		return c
	}
	return m.otherErrors
}

// finished records a finished request: its usage, finish reason and latencies, from the times
// its stream saw (the same for streamed and whole responses).
func (m *serverMetrics) finished(d *Delta, st *Stream, start time.Time) {
	now := time.Now()
	m.promptTok.Add(float64(d.PromptTokens))
	m.prefixQueries.Add(float64(d.PromptTokens))
	m.prefixHits.Add(float64(d.CachedTokens))
	m.preemptions.Add(float64(d.Preemptions))
	m.specDrafts.Add(float64(d.SpecDrafts))
	m.specDraftTokens.Add(float64(d.SpecDraftTokens))
	for j, n := range d.SpecAccepted {
		m.specAccepted.Add(float64(n))
		if j < len(m.specAcceptedPos) {
			m.specAcceptedPos[j].Add(float64(n))
		}
	}
	m.genTok.Add(float64(d.CompletionTokens))
	m.promptLen.Observe(float64(d.PromptTokens))
	m.genLen.Observe(float64(d.CompletionTokens))
	m.maxGenLen.Observe(float64(d.CompletionTokens))
	if c := m.success[d.FinishReason.String()]; c != nil {
		c.Inc()
	}
	m.e2e.Observe(now.Sub(start).Seconds())
	var first time.Time
	if st != nil { // nil for a choice that could not be submitted
		first, _ = st.Times()
	}
	if st != nil && st.streamed {
		m.coalesced.Add(float64(st.Merged()))
	}
	if st != nil && st.access != nil {
		st.access.finished(d, first)
	}
	if !first.IsZero() {
		m.ttft.Observe(first.Sub(start).Seconds())
		if d.CompletionTokens > 1 {
			m.tpot.Observe(now.Sub(first).Seconds() / float64(d.CompletionTokens-1))
		}
	}
	if d.QueueTime > 0 || d.PrefillTime > 0 || d.DecodeTime > 0 {
		m.queue.Observe(d.QueueTime.Seconds())
		m.prefill.Observe(d.PrefillTime.Seconds())
		m.decode.Observe(d.DecodeTime.Seconds())
	}
}
