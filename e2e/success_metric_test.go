package e2e

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// successByReason reads vllm:request_success_total off /metrics, summed by finished_reason.
func successByReason(t *testing.T, e *engine) map[string]float64 {
	t.Helper()
	b, err := httpGetWith(freshClient, e.base+"/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	reason := regexp.MustCompile(`finished_reason="([^"]*)"`)
	out := map[string]float64{}
	for _, line := range strings.Split(b, "\n") {
		if !strings.HasPrefix(line, "vllm:request_success_total{") {
			continue
		}
		m := reason.FindStringSubmatch(line)
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if m == nil || err != nil {
			t.Fatalf("bad series %q", line)
		}
		out[m[1]] += v
	}
	return out
}

// TestToolCallFinishCountsAsStop: vllm:request_success_total is labelled as vLLM labels it, by
// the engine's finish reason (stop, length, abort, error): a request that ends in tool calls
// (finish_reason "tool_calls" in the response) finished at the engine with a stop and counts
// under stop, as in vLLM, whose engine knows nothing of tools. Before, a finished_reason
// "tool_calls" series was published that nothing ever incremented, so a dashboard of it read 0
// however many calls were made.
func TestToolCallFinishCountsAsStop(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	before := successByReason(t, e)
	if got := slices.Sorted(maps.Keys(before)); !slices.Equal(got, []string{"abort", "error", "length", "stop"}) {
		t.Errorf("finished_reason values %v, want vLLM's abort, error, length, stop", got)
	}
	calls := 0
	for seed := 1; seed <= 3; seed++ {
		r := e.chatWhole(t, toolRequest(map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, seed))
		if r.Finish == "tool_calls" {
			calls++
		}
		t.Logf("seed %d: finish %s, %d calls", seed, r.Finish, len(r.Names))
	}
	if calls == 0 {
		t.Fatal("no request ended in a tool call")
	}
	var after map[string]float64
	for range 20 { // the series of other workers are published once a second
		if after = successByReason(t, e); after["stop"]-before["stop"] >= float64(calls) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := after["stop"] - before["stop"]; d < float64(calls) {
		t.Errorf("stop grew by %v after %d tool-call finishes: %v -> %v", d, calls, before, after)
	}
	if _, ok := after["tool_calls"]; ok {
		t.Errorf("a finished_reason=\"tool_calls\" series: %v", after)
	}
	t.Log(fmt.Sprint(before, " -> ", after))
}
