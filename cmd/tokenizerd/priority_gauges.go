package main

import (
	"slices"
	"strconv"

	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/shard"
	"github.com/llmserve/llmserve/worker"
)

// maxPrioritySeries bounds the priority values /metrics shows (a client picks its priority, so
// the label values are not fixed): the most urgent values, the rest under priority="other".
const maxPrioritySeries = 8

// registerPriorityGauges exposes the ranks' queues per priority value (--scheduling-policy
// priority orders them by it), summed over the ranks: llm_requests_waiting_by_priority
// {model_name, priority}. Only values requests wait at are shown; a value whose queue empties
// drops out of the family.
func registerPriorityGauges(reg *metrics.Registry, w *worker.Worker, model string) {
	reg.NewGaugeFamilyFunc("llm_requests_waiting_by_priority",
		"Requests queued at the ranks' schedulers per priority value (lower runs first), all ranks; the least urgent values beyond the first 8 are summed under priority=\"other\".",
		func() []metrics.Sample { return prioritySamples(w.Snapshot().Ranks, model) })
}

// prioritySamples sums the ranks' per-priority counts: the maxPrioritySeries lowest values each
// on its own, everything after them (and each rank's own overflow) under "other".
func prioritySamples(ranks []shard.RankLoad, model string) []metrics.Sample {
	var all []shard.PriorityCount
	var other int64
	for i := range ranks {
		rl := &ranks[i].Reported
		other += rl.WaitingOtherPriority
		for _, c := range rl.WaitingByPriority {
			if k := slices.IndexFunc(all, func(a shard.PriorityCount) bool { return a.Priority == c.Priority }); k >= 0 {
				all[k].Count += c.Count
			} else {
				all = append(all, c)
			}
		}
	}
	slices.SortFunc(all, func(a, b shard.PriorityCount) int { return a.Priority - b.Priority })
	if len(all) > maxPrioritySeries {
		for _, c := range all[maxPrioritySeries:] {
			other += c.Count
		}
		all = all[:maxPrioritySeries]
	}
	out := make([]metrics.Sample, 0, len(all)+1)
	for _, c := range all {
		out = append(out, metrics.Sample{Labels: metrics.Labels{{"model_name", model}, {"priority", strconv.Itoa(c.Priority)}}, Value: float64(c.Count)})
	}
	if other > 0 {
		out = append(out, metrics.Sample{Labels: metrics.Labels{{"model_name", model}, {"priority", "other"}}, Value: float64(other)})
	}
	return out
}
