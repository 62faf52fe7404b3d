package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/worker"
)

// Data parallelism (issue 6), end to end: R = 4 schedulerd ranks running the token-replay
// benchmark backend (--load-format replay) with a fixed step time, so that long requests stay
// running while the test reads where they landed. Where a request landed is read from the ranks'
// own load reports (running, waiting, KV tokens), which every worker sees identically, and
// cross-checked against the sum over all workers of each worker's dispatch ledger (`sent`).

const dpRanks = 4

// replayArgs makes every rank a replay rank with the given step time.
func replayArgs(step time.Duration) []string {
	return []string{"--load-format", "replay", "--replay-step-time", step.String()}
}

// freshClient opens a new connection per request, so that SO_REUSEPORT spreads successive
// requests over the tokenizer workers (a kept-alive connection always reaches the same one).
var freshClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// workerViews reads /get_load over fresh connections until it has every worker's view.
func workerViews(t *testing.T, e *engine) map[int]worker.LoadReport {
	t.Helper()
	views := map[int]worker.LoadReport{}
	for try := 0; len(views) < e.opts.workers; try++ {
		if try == 500 {
			t.Fatalf("/get_load reached only workers %v of %d in %d tries", keys(views), e.opts.workers, try)
		}
		var rep worker.LoadReport
		if err := getJSONWith(freshClient, e.base+"/get_load", &rep); err != nil {
			t.Fatalf("/get_load: %v", err)
		}
		views[rep.Worker] = rep
	}
	return views
}

func keys[V any](m map[int]V) []int {
	var k []int
	for i := range m {
		k = append(k, i)
	}
	return k
}

func getJSONWith(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// sentPerRank sums the workers' dispatch ledgers: how many requests each rank was sent in all.
func sentPerRank(views map[int]worker.LoadReport) []uint64 {
	out := make([]uint64, dpRanks)
	for _, v := range views {
		for _, r := range v.Dispatch.Ranks {
			out[r.Rank] += r.Sent
		}
	}
	return out
}

// waitRunning polls /get_load until the ranks together report want running requests, none
// waiting, and no dispatch unacknowledged; it returns that view.
func waitRunning(t *testing.T, e *engine, want int, timeout time.Duration) worker.LoadReport {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var rep worker.LoadReport
	for time.Now().Before(deadline) {
		rep = worker.LoadReport{}
		if err := getJSONWith(freshClient, e.base+"/get_load", &rep); err != nil {
			t.Fatalf("/get_load: %v", err)
		}
		running, busy := 0, false
		for _, r := range rep.Dispatch.Ranks {
			running += r.Reported.Running
			busy = busy || r.Reported.Waiting > 0 || r.Pending > 0
		}
		if running == want && !busy {
			return rep
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("ranks never reported %d running requests: last view %+v", want, rep.Dispatch.Ranks)
	return rep
}

// streamResult is how one streamed request ended.
type streamResult struct {
	events []string
	err    error
	end    time.Time
}

// longStreams starts one streaming /generate per prompt, each asking for maxNew tokens with
// EOS ignored; extra is merged into every body. The streams run until they finish, fail, or
// ctx is cancelled (a client disconnect, which aborts them). Results arrive on the channel.
func longStreams(ctx context.Context, e *engine, prompts [][]int32, maxNew int, extra map[string]any) <-chan streamResult {
	out := make(chan streamResult, len(prompts))
	for _, p := range prompts {
		body := map[string]any{"input_ids": p, "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": maxNew, "ignore_eos": true}}
		for k, v := range extra {
			body[k] = v
		}
		go func() {
			ev, err := e.sseEvents(ctx, "/generate", body)
			out <- streamResult{events: ev, err: err, end: time.Now()}
		}()
	}
	return out
}

// prompts returns n distinct id prompts of the given lengths (cycled).
func prompts(rng *rand.Rand, n int, lens ...int) [][]int32 {
	out := make([][]int32, n)
	for i := range out {
		p := make([]int32, lens[i%len(lens)])
		for j := range p {
			p[j] = int32(1 + rng.IntN(8000))
		}
		out[i] = p
	}
	return out
}

// TestDPDispatchBalance sends 100 concurrent long requests to 4 ranks from 1 and from 3
// tokenizer workers and checks where they landed.
func TestDPDispatchBalance(t *testing.T) {
	cases := []struct {
		method  string
		workers int
		// limit is the most requests one rank may hold.
		limit int
	}{
		{"shortest_queue", 1, 26},
		{"shortest_queue", 3, 26},
		{"round_robin", 1, 25}, // exact
		// Each worker cycles through the ranks on its own, so a rank gets between the sums of
		// floor and ceil of (worker's requests / 4) over the workers: 25 +- 2 for 100 requests
		// over 3 workers. Each worker's own ledger is checked to be exact below.
		{"round_robin", 3, 27},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/workers=%d", c.method, c.workers), func(t *testing.T) {
			// A generous rank timeout: on a loaded 2-core machine a late heartbeat must not mark
			// a rank down (which resets its ledger) in a test about balance; TestDPRankDeath
			// covers death.
			e := startEngine(t, engineOpts{workers: c.workers, dpSize: dpRanks, lbMethod: c.method,
				rankTimeout: 5 * time.Second, schedArgs: replayArgs(20 * time.Millisecond)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const n = 100
			results := longStreams(ctx, e, prompts(rand.New(rand.NewPCG(1, 2)), n, 64), 3000, nil)
			rep := waitRunning(t, e, n, 20*time.Second)
			views := workerViews(t, e)
			sent := sentPerRank(views)
			running := make([]int, dpRanks)
			for _, r := range rep.Dispatch.Ranks {
				running[r.Rank] = r.Reported.Running
			}
			t.Logf("running per rank %v; sent per rank (summed over %d workers) %v", running, len(views), sent)
			for w, v := range views {
				var ws []uint64
				for _, r := range v.Dispatch.Ranks {
					ws = append(ws, r.Sent)
				}
				t.Logf("worker %d sent %v", w, ws)
			}
			var total uint64
			for r := range dpRanks {
				total += sent[r]
				if running[r] > c.limit || sent[r] > uint64(c.limit) {
					t.Errorf("rank %d holds %d running (%d sent), want at most %d", r, running[r], sent[r], c.limit)
				}
				if uint64(running[r]) != sent[r] {
					t.Errorf("rank %d: %d running but workers sent it %d", r, running[r], sent[r])
				}
			}
			if total != n {
				t.Errorf("workers sent %d requests in all, want %d", total, n)
			}
			if c.method == "round_robin" {
				for w, v := range views {
					lo, hi := v.Dispatch.Ranks[0].Sent, v.Dispatch.Ranks[0].Sent
					for _, r := range v.Dispatch.Ranks {
						lo, hi = min(lo, r.Sent), max(hi, r.Sent)
					}
					if hi-lo > 1 {
						t.Errorf("round_robin worker %d sent %d..%d per rank, want a spread of at most 1", w, lo, hi)
					}
				}
			}
			checkLoadTotals(t, rep)
			checkRankMetrics(t, e, views)
			cancel()
			for range n {
				if r := <-results; r.err == nil && len(r.events) > 0 && r.events[len(r.events)-1] == "[DONE]" {
					t.Errorf("a 3000-token request finished before the test let it go")
				}
			}
		})
	}
}

// checkLoadTotals checks that /get_load's totals are the sums of its per-rank rows.
func checkLoadTotals(t *testing.T, rep worker.LoadReport) {
	t.Helper()
	var running, waiting int
	var kv, kvCap int64
	for _, r := range rep.Dispatch.Ranks {
		running += r.Reported.Running
		waiting += r.Reported.Waiting
		kv += r.Reported.KVTokensUsed
		kvCap += r.Reported.KVTokensCapacity
	}
	if rep.Totals.Running != running || rep.Totals.Waiting != waiting || rep.Totals.KVTokensUsed != kv || rep.Totals.KVTokensCapacity != kvCap {
		t.Errorf("/get_load totals %+v, per-rank sums running %d waiting %d kv %d/%d", rep.Totals, running, waiting, kv, kvCap)
	}
	if len(rep.Dispatch.Ranks) != dpRanks || kvCap <= 0 {
		t.Errorf("/get_load shows %d ranks with KV capacity %d", len(rep.Dispatch.Ranks), kvCap)
	}
}

var metricLine = regexp.MustCompile(`^(llm_rank_[a-z_]+)\{([^}]*)\} (\S+)$`)

// rankMetrics scrapes /metrics over fresh connections until it has every worker's, and returns
// metric -> worker -> rank -> value for the llm_rank_* gauges.
func rankMetrics(t *testing.T, e *engine) map[string]map[int]map[int]float64 {
	t.Helper()
	out := map[string]map[int]map[int]float64{}
	seen := map[int]bool{}
	for try := 0; len(seen) < e.opts.workers; try++ {
		if try == 500 {
			t.Fatalf("/metrics reached only workers %v of %d", seen, e.opts.workers)
		}
		resp, err := freshClient.Get(e.base + "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v", err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			m := metricLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			labels := map[string]int{}
			for _, kv := range strings.Split(m[2], ",") {
				k, v, _ := strings.Cut(kv, "=")
				labels[k], _ = strconv.Atoi(strings.Trim(v, `"`))
			}
			val, _ := strconv.ParseFloat(m[3], 64)
			w, r := labels["worker"], labels["rank"]
			seen[w] = true
			if out[m[1]] == nil {
				out[m[1]] = map[int]map[int]float64{}
			}
			if out[m[1]][w] == nil {
				out[m[1]][w] = map[int]float64{}
			}
			out[m[1]][w][r] = val
		}
		resp.Body.Close()
	}
	return out
}

// checkRankMetrics checks that every worker exports the llm_rank_* gauges for every rank and
// that they agree with /get_load while the load is steady.
func checkRankMetrics(t *testing.T, e *engine, views map[int]worker.LoadReport) {
	t.Helper()
	// Each worker publishes its own series to the shared store once a second, so a scrape may
	// show another worker's values up to that old: poll until they agree (the load is held).
	var errs []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		errs = rankMetricErrors(rankMetrics(t, e), e.opts.workers, views)
		if len(errs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, err := range errs {
		t.Error(err)
	}
}

// rankMetricErrors compares the rank series of one round of scrapes with the workers' /get_load.
func rankMetricErrors(m map[string]map[int]map[int]float64, workers int, views map[int]worker.LoadReport) []string {
	var errs []string
	for _, name := range []string{"llm_rank_up", "llm_rank_running_requests", "llm_rank_waiting_requests",
		"llm_rank_kv_tokens_used", "llm_rank_kv_tokens_capacity", "llm_rank_pending_requests",
		"llm_rank_preemptions_total", "llm_rank_prefix_hit_tokens_total"} {
		for w := range workers {
			if len(m[name][w]) != dpRanks {
				errs = append(errs, fmt.Sprintf("/metrics of worker %d has %s for ranks %v, want all %d", w, name, keys(m[name][w]), dpRanks))
			}
		}
	}
	for w, v := range views {
		for _, r := range v.Dispatch.Ranks {
			if got := m["llm_rank_running_requests"][w][r.Rank]; got != float64(r.Reported.Running) {
				errs = append(errs, fmt.Sprintf("worker %d rank %d: llm_rank_running_requests %v, /get_load running %d", w, r.Rank, got, r.Reported.Running))
			}
			if m["llm_rank_up"][w][r.Rank] != 1 {
				errs = append(errs, fmt.Sprintf("worker %d rank %d: llm_rank_up %v, want 1", w, r.Rank, m["llm_rank_up"][w][r.Rank]))
			}
		}
	}
	return errs
}

// TestDPMinimumTokens sends a shuffled mix of long and short prompts and checks that the ranks
// end up holding nearly equal KV tokens, although they hold very different request counts.
func TestDPMinimumTokens(t *testing.T) {
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			// A slow step keeps decode growth (one token per running request per step) small
			// next to the prompts while the test reads the load.
			e := startEngine(t, engineOpts{workers: workers, dpSize: dpRanks, lbMethod: "minimum_tokens",
				rankTimeout: 5 * time.Second, schedArgs: replayArgs(100 * time.Millisecond)})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const n = 100
			rng := rand.New(rand.NewPCG(3, 4))
			ps := prompts(rng, n, 1000, 1000, 40, 40, 40) // 40 long, 60 short
			rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
			results := longStreams(ctx, e, ps, 3000, nil)
			waitRunning(t, e, n, 20*time.Second)
			// Running includes requests still in chunked prefill; read the load once every
			// prompt is in the KV cache.
			var promptTokens int64
			for _, p := range ps {
				promptTokens += int64(len(p))
			}
			var rep worker.LoadReport
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				rep = worker.LoadReport{}
				if err := getJSONWith(freshClient, e.base+"/get_load", &rep); err != nil {
					t.Fatal(err)
				}
				if rep.Totals.KVTokensUsed >= promptTokens {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("KV tokens in use %d never reached the prompts' %d", rep.Totals.KVTokensUsed, promptTokens)
				}
			}
			kv := make([]float64, dpRanks)
			var mean float64
			running := make([]int, dpRanks)
			for _, r := range rep.Dispatch.Ranks {
				kv[r.Rank] = float64(r.Reported.KVTokensUsed + r.Reported.WaitingTokens)
				running[r.Rank] = r.Reported.Running
				mean += kv[r.Rank] / dpRanks
			}
			t.Logf("KV tokens per rank %v (mean %.0f); running per rank %v", kv, mean, running)
			for r := range dpRanks {
				if dev := kv[r]/mean - 1; dev > 0.10 || dev < -0.10 {
					t.Errorf("rank %d holds %.0f KV tokens, %.1f%% off the mean %.0f (want within 10%%)", r, kv[r], 100*dev, mean)
				}
			}
			checkLoadTotals(t, rep)
			cancel()
			for range n {
				<-results
			}
		})
	}
}

// TestDPRankDeath kills one rank under load and checks that it is reported, that only its
// requests fail (fast, with an error naming it), that new requests go to the live ranks, and
// that it rejoins after a restart with nothing else restarted.
func TestDPRankDeath(t *testing.T) {
	const workers, victim, perRank = 2, 2, 10
	victimName := fmt.Sprintf("schedulerd%d", victim)
	e := startEngine(t, engineOpts{workers: workers, dpSize: dpRanks, lbMethod: "shortest_queue",
		rankTimeout: 500 * time.Millisecond, schedArgs: replayArgs(20 * time.Millisecond)})
	pids := map[string]int{}
	for name, p := range e.procs {
		pids[name] = p.cmd.Process.Pid
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(5, 6))
	first := longStreams(ctx, e, prompts(rng, dpRanks*perRank, 32), 3000, nil)
	rep := waitRunning(t, e, dpRanks*perRank, 20*time.Second)
	onVictim := rep.Dispatch.Ranks[victim].Reported.Running
	liveRunning := -onVictim // what the live ranks keep running after the kill
	for _, r := range rep.Dispatch.Ranks {
		liveRunning += r.Reported.Running
	}
	if onVictim == 0 {
		t.Fatalf("no request landed on rank %d: %+v", victim, rep.Dispatch.Ranks)
	}
	sentBefore := sentPerRank(workerViews(t, e))

	e.kill(victimName)
	killed := time.Now()

	// Exactly the victim's requests fail, each within a second, with an error naming the rank.
	for i := range onVictim {
		select {
		case r := <-first:
			if r.err != nil {
				t.Fatalf("stream %d: %v", i, r.err)
			}
			if lat := r.end.Sub(killed); lat > time.Second {
				t.Errorf("a request on the dead rank failed after %v, want within 1s", lat)
			}
			if len(r.events) < 2 || r.events[len(r.events)-1] != "[DONE]" ||
				!strings.Contains(r.events[len(r.events)-2], "error") || !strings.Contains(r.events[len(r.events)-2], fmt.Sprintf("rank %d", victim)) {
				t.Errorf("a request on the dead rank ended without an error naming rank %d: %q", victim, r.events[max(0, len(r.events)-2):])
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("only %d of the %d requests on rank %d ended within 3s of its death", i, onVictim, victim)
		}
	}
	select {
	case r := <-first:
		t.Fatalf("a request on a live rank ended: err %v, last events %q", r.err, r.events[max(0, len(r.events)-2):])
	case <-time.After(300 * time.Millisecond):
	}

	// Every worker reports the rank down: /health 503 naming it, /get_load, /metrics.
	for range 3 * workers {
		code, body := getWith(freshClient, e.base+"/health")
		if code != 503 || !strings.Contains(body, fmt.Sprintf("rank %d is down", victim)) {
			t.Errorf("/health with rank %d dead: %d %s, want 503 naming it", victim, code, body)
		}
	}
	for w, v := range workerViews(t, e) {
		for _, r := range v.Dispatch.Ranks {
			if r.Up != (r.Rank != victim) {
				t.Errorf("worker %d /get_load: rank %d up=%v (%s)", w, r.Rank, r.Up, r.DownReason)
			}
			if r.Rank == victim && !strings.Contains(r.DownReason, fmt.Sprintf("rank %d", victim)) {
				t.Errorf("worker %d /get_load: rank %d down reason %q does not name it", w, victim, r.DownReason)
			}
		}
	}
	// Other workers' series are up to their one-second publish period old: poll until they agree.
	var stale []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		stale = stale[:0]
		for w, ranks := range rankMetrics(t, e)["llm_rank_up"] {
			for r, up := range ranks {
				if want := r != victim; (up == 1) != want {
					stale = append(stale, fmt.Sprintf("worker %d: llm_rank_up{rank=%d} = %v", w, r, up))
				}
			}
		}
		if len(stale) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range stale {
		t.Error(s)
	}

	// New requests go to the live ranks and succeed; pinning one to the dead rank is refused.
	for i := range 12 {
		code, body := postWith(freshClient, e.base+"/generate", map[string]any{"input_ids": promptIDs,
			"sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}})
		if code != 200 {
			t.Fatalf("request %d with rank %d dead: %d %s", i, victim, code, body)
		}
	}
	sentAfter := sentPerRank(workerViews(t, e))
	if sentAfter[victim] != sentBefore[victim] {
		t.Errorf("dead rank %d was sent %d new requests", victim, sentAfter[victim]-sentBefore[victim])
	}
	code, body := postWith(freshClient, e.base+"/generate", map[string]any{"input_ids": promptIDs, "routed_dp_rank": victim,
		"sampling_params": map[string]any{"max_new_tokens": 4}})
	if code != 503 || !strings.Contains(body, fmt.Sprintf("rank %d is down", victim)) {
		t.Errorf("request routed to dead rank %d: %d %s, want 503 naming it", victim, code, body)
	}

	// Restart only the victim; it rejoins: healthy again, served by routing, and it takes the
	// next requests since it is the emptiest rank.
	e.restart(victimName)
	e.waitHealthy(30 * time.Second)
	for name, p := range e.procs {
		if name != victimName && (p.cmd.ProcessState != nil || p.cmd.Process.Pid != pids[name]) {
			t.Errorf("%s was restarted or stopped (pid %d, was %d)", name, p.cmd.Process.Pid, pids[name])
		}
	}
	code, body = postWith(freshClient, e.base+"/generate", map[string]any{"input_ids": promptIDs, "routed_dp_rank": victim,
		"sampling_params": map[string]any{"max_new_tokens": 4, "ignore_eos": true}})
	if code != 200 {
		t.Fatalf("request routed to restarted rank %d: %d %s", victim, code, body)
	}
	const more = 6
	second := longStreams(ctx, e, prompts(rng, more, 32), 3000, nil)
	rep = waitRunning(t, e, liveRunning+more, 20*time.Second)
	if got := rep.Dispatch.Ranks[victim].Reported.Running; got != more {
		t.Errorf("restarted rank %d runs %d of %d new requests, want all (it was the emptiest): %+v", victim, got, more, rep.Dispatch.Ranks)
	}
	cancel()
	for range liveRunning + more {
		select {
		case <-first:
		case <-second:
		}
	}
}

func getWith(c *http.Client, url string) (int, string) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func postWith(c *http.Client, url string, body any) (int, string) {
	b, _ := json.Marshal(body)
	resp, err := c.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
