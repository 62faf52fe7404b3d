package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The multi-turn trace (-multiturn): conversations that each send turns in a closed loop,
// every turn's prompt being the conversation's whole history (a system prompt shared by a
// group of conversations, then every previous user turn and reply) plus a new user turn.
// User turns and replies vary in length around the flags' values. Each conversation keeps
// one HTTP connection, as a chat front end does, so its turns reach
// the same tokenizer worker. It measures what prefix-aware dispatch is for: the prompt
// tokens the ranks' prefix caches supplied (from the ranks' cumulative counters in
// /get_load), each turn's time to first token, and how evenly the ranks run (max/min of the
// ranks' running requests, sampled every -mt-sample). With -oracle every conversation is
// pinned (routed_dp_rank) to rank c mod R: the sticky placement that reuses every prefix.

// multiTurnConfig is the trace's shape.
type multiTurnConfig struct {
	Conversations, Turns, Groups  int
	SystemLen, UserLen, OutputLen int
	Oracle                        bool
	Sample                        time.Duration
	Seed                          uint64
}

// MultiTurnResult is one run of the trace.
type MultiTurnResult struct {
	Label           string  `json:"label"`
	Method          string  `json:"method"`
	Oracle          bool    `json:"oracle"`
	Ranks           int     `json:"ranks"`
	Conversations   int     `json:"conversations"`
	Turns           int     `json:"turns"`
	Requests        int     `json:"requests"`
	Failed          int     `json:"failed"`
	WallSeconds     float64 `json:"wall_s"`
	PromptTokens    int64   `json:"prompt_tokens"`
	PrefixHitTokens int64   `json:"prefix_hit_tokens"`
	TTFTP50ms       float64 `json:"ttft_p50_ms"`
	TTFTP99ms       float64 `json:"ttft_p99_ms"`
	// MaxMinRunning is the largest max/min of the ranks' running requests over the samples
	// taken while every conversation was under way (from the last one's first turn to the
	// first one's last), Samples how many; -1 when a rank ran nothing in such a sample.
	MaxMinRunning float64 `json:"max_min_running"`
	Samples       int     `json:"samples"`
	// MaxMinSeries is each such sample's max/min (-1: a rank ran nothing).
	MaxMinSeries []float64 `json:"max_min_series"`
}

// rankCounters is what the trace reads of /get_load.
type rankCounters struct {
	Dispatch struct {
		Method string `json:"method"`
		Ranks  []struct {
			Up       bool `json:"up"`
			Reported struct {
				Running         int    `json:"running"`
				PrefixHitTokens uint64 `json:"prefix_hit_tokens"`
			} `json:"reported"`
		} `json:"ranks"`
	} `json:"dispatch"`
}

func (c *rankCounters) prefixHits() (n uint64) {
	for _, r := range c.Dispatch.Ranks {
		n += r.Reported.PrefixHitTokens
	}
	return n
}

func runMultiTurn(base, label string, cfg multiTurnConfig) (MultiTurnResult, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	var before rankCounters
	if err := getJSON(context.Background(), client, base+"/get_load", &before); err != nil {
		return MultiTurnResult{}, err
	}
	ranks := len(before.Dispatch.Ranks)
	res := MultiTurnResult{Label: label, Method: before.Dispatch.Method, Oracle: cfg.Oracle, Ranks: ranks,
		Conversations: cfg.Conversations, Turns: cfg.Turns}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	tok := func() int32 { return int32(100 + rng.IntN(8000)) }
	systems := make([][]int32, cfg.Groups)
	for g := range systems {
		for range cfg.SystemLen {
			systems[g] = append(systems[g], tok())
		}
	}
	// Turn lengths vary (half to one and a half times the flags' values) so that the
	// conversations do not all finish their turns in the same step.
	jitter := func(n int) int { return max(1, n/2+rng.IntN(n+1)) }
	users := make([][][]int32, cfg.Conversations) // conversation, turn -> user tokens
	outLens := make([][]int, cfg.Conversations)   // conversation, turn -> reply tokens
	for c := range users {
		for range cfg.Turns {
			u := make([]int32, jitter(cfg.UserLen))
			for i := range u {
				u[i] = tok()
			}
			users[c] = append(users[c], u)
			outLens[c] = append(outLens[c], jitter(cfg.OutputLen))
		}
	}

	// steady is when every conversation is under way: started once all have begun their first
	// turn, ended when the first one finishes its last.
	var started atomic.Int32
	steadyOn, steadyOff := make(chan struct{}), make(chan struct{})
	var offOnce sync.Once
	var mu sync.Mutex // guards ttfts, res.Failed, res.PromptTokens
	var ttfts []float64
	ctx, stop := context.WithCancel(context.Background())
	sampled := make(chan []float64, 1)
	go func() { sampled <- sampleMaxMin(ctx, client, base, cfg.Sample, steadyOn, steadyOff) }()

	start := time.Now()
	var wg sync.WaitGroup
	for c := range cfg.Conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
			history := slices.Clone(systems[c%cfg.Groups])
			for turn := range cfg.Turns {
				if turn == 0 && int(started.Add(1)) == cfg.Conversations {
					close(steadyOn)
				}
				history = append(history, users[c][turn]...)
				routed := -1
				if cfg.Oracle {
					routed = c % ranks
				}
				ttft, out, err := generateTurn(hc, base, history, outLens[c][turn], routed)
				mu.Lock()
				if err != nil {
					res.Failed++
				} else {
					ttfts = append(ttfts, ttft.Seconds()*1000)
					res.PromptTokens += int64(len(history))
				}
				mu.Unlock()
				if err != nil {
					break
				}
				history = append(history, out...)
			}
			offOnce.Do(func() { close(steadyOff) })
		}()
	}
	wg.Wait()
	res.WallSeconds = time.Since(start).Seconds()
	time.Sleep(2 * cfg.Sample) // the ranks' last reports carry their final counters
	stop()
	res.MaxMinSeries = <-sampled
	for i, v := range res.MaxMinSeries {
		res.MaxMinRunning = max(res.MaxMinRunning, v)
		if math.IsInf(v, 1) {
			res.MaxMinSeries[i] = -1 // JSON has no infinity
		}
	}
	if math.IsInf(res.MaxMinRunning, 1) {
		res.MaxMinRunning = -1
	}
	res.Samples = len(res.MaxMinSeries)
	var after rankCounters
	if err := getJSON(context.Background(), client, base+"/get_load", &after); err != nil {
		return res, err
	}
	res.PrefixHitTokens = int64(after.prefixHits() - before.prefixHits())
	res.Requests = len(ttfts) + res.Failed
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		q := func(p float64) float64 { return ttfts[min(len(ttfts)-1, int(math.Ceil(p*float64(len(ttfts))))-1)] }
		res.TTFTP50ms, res.TTFTP99ms = q(0.5), q(0.99)
	}
	return res, nil
}

// sampleMaxMin records max/min of the ranks' running requests every period between on and off.
func sampleMaxMin(ctx context.Context, client *http.Client, base string, period time.Duration, on, off <-chan struct{}) []float64 {
	select {
	case <-on:
	case <-ctx.Done():
		return nil
	}
	t := time.NewTicker(period)
	defer t.Stop()
	var out []float64
	for {
		select {
		case <-off:
			return out
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		var v rankCounters
		if err := getJSON(ctx, client, base+"/get_load", &v); err != nil {
			continue
		}
		lo, hi := math.MaxInt, 0
		for _, r := range v.Dispatch.Ranks {
			if r.Up {
				lo, hi = min(lo, r.Reported.Running), max(hi, r.Reported.Running)
			}
		}
		switch {
		case lo == math.MaxInt:
		case lo == 0:
			out = append(out, math.Inf(1))
		default:
			out = append(out, float64(hi)/float64(lo))
		}
	}
}

// generateTurn streams one /generate request and returns its time to first token and ids.
func generateTurn(hc *http.Client, base string, prompt []int32, outLen, routed int) (time.Duration, []int32, error) {
	body := map[string]any{"input_ids": prompt, "stream": true,
		"sampling_params": map[string]any{"max_new_tokens": outLen, "temperature": 0, "ignore_eos": true}}
	if routed >= 0 {
		body["routed_dp_rank"] = routed
	}
	b, _ := json.Marshal(body)
	t0 := time.Now()
	resp, err := hc.Post(base+"/generate", "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, nil, fmt.Errorf("/generate: status %d", resp.StatusCode)
	}
	var ttft time.Duration
	var ids []int32
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var obj struct {
			OutputIDs []int32 `json:"output_ids"`
		}
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			return 0, nil, fmt.Errorf("/generate chunk %q: %w", line, err)
		}
		if ttft == 0 && len(obj.OutputIDs) > 0 {
			ttft = time.Since(t0)
		}
		ids = append(ids, obj.OutputIDs...)
	}
	if err := sc.Err(); err != nil {
		return 0, nil, err
	}
	if len(ids) != outLen {
		return 0, nil, fmt.Errorf("/generate: %d tokens, want %d", len(ids), outLen)
	}
	return ttft, ids, nil
}
