package e2e

import (
	"context"
	"io"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// eppScrape is what the Gateway API Inference Extension's endpoint picker reads of one /metrics
// answer, and which worker answered.
type eppScrape struct {
	worker                         string
	waiting, running, kvUsage      float64
	blockSize, numBlocks           string
	hasCacheInfo, hasLoraInfo      bool
	loraMax, loraRunning, loraWait string
}

var (
	reGauge     = regexp.MustCompile(`(?m)^(vllm:num_requests_waiting|vllm:num_requests_running|vllm:kv_cache_usage_perc)\{model_name="[^"]*"\} (\S+)$`)
	reCacheInfo = regexp.MustCompile(`(?m)^vllm:cache_config_info\{block_size="(\d+)",num_gpu_blocks="(\d+)"\} 1$`)
	reLoraInfo  = regexp.MustCompile(`(?m)^vllm:lora_requests_info\{max_lora="(\d*)",running_lora_adapters="([^"]*)",waiting_lora_adapters="([^"]*)"\} \S+$`)
)

func scrapeEPP(t *testing.T, e *engine) eppScrape {
	t.Helper()
	resp, err := freshClient.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	// Every worker's own series show in any worker's answer; the header names the one that
	// answered.
	s := eppScrape{worker: resp.Header.Get("X-LLMServe-Worker")}
	seen := map[string]bool{}
	for _, m := range reGauge.FindAllStringSubmatch(text, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		seen[m[1]] = true
		switch m[1] {
		case "vllm:num_requests_waiting":
			s.waiting = v
		case "vllm:num_requests_running":
			s.running = v
		case "vllm:kv_cache_usage_perc":
			s.kvUsage = v
		}
	}
	if len(seen) != 3 {
		t.Fatalf("worker %s: /metrics lacks some of the EPP gauges (found %v):\n%s", s.worker, seen, tail(text, 3000))
	}
	if m := reCacheInfo.FindStringSubmatch(text); m != nil {
		s.hasCacheInfo, s.blockSize, s.numBlocks = true, m[1], m[2]
	}
	if m := reLoraInfo.FindStringSubmatch(text); m != nil {
		s.hasLoraInfo, s.loraMax, s.loraRunning, s.loraWait = true, m[1], m[2], m[3]
	}
	return s
}

// TestEPPContract: with 3 tokenizer workers, whichever worker answers /metrics serves the
// engine-wide gauges the Inference Extension's endpoint picker reads (a request running on the
// engine shows in every worker's vllm:num_requests_running), vllm:cache_config_info names the
// ranks' KV geometry and vllm:lora_requests_info no adapters; on SIGTERM /health turns 503
// while the workers still answer, before the drain closes the port.
func TestEPPContract(t *testing.T) {
	const workers, ranks = 3, 2
	e := startEngine(t, engineOpts{workers: workers, dpSize: ranks,
		schedArgs: []string{"--load-format", "replay", "--replay-step-time", "20ms", "--replay-kv-tokens", "8192"},
		tokArgs:   []string{"--drain-delay", "3s"}})

	// One long request in flight, held by whichever worker took its connection.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streaming := make(chan error, 1)
	go func() {
		streaming <- e.streamEvents(ctx, "/generate", map[string]any{"input_ids": []int{400, 1234, 87, 9},
			"sampling_params": map[string]any{"max_new_tokens": 2000, "ignore_eos": true}, "stream": true},
			func([]byte) error { return nil })
	}()

	byWorker := map[string]eppScrape{}
	for deadline := time.Now().Add(20 * time.Second); len(byWorker) < workers; {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s only workers %v showed the running request on /metrics", byWorker)
		}
		s := scrapeEPP(t, e)
		if s.running >= 1 && s.hasCacheInfo {
			byWorker[s.worker] = s
		}
		time.Sleep(20 * time.Millisecond)
	}
	for w, s := range byWorker {
		// 8192 replay KV positions per rank in blocks of 16: 512 blocks each.
		if s.blockSize != "16" || s.numBlocks != strconv.Itoa(ranks*8192/16) {
			t.Errorf("worker %s: cache_config_info block_size %s num_gpu_blocks %s, want 16 and %d", w, s.blockSize, s.numBlocks, ranks*8192/16)
		}
		if s.kvUsage <= 0 || s.kvUsage > 1 {
			t.Errorf("worker %s: vllm:kv_cache_usage_perc %v with a request running, want in (0, 1]", w, s.kvUsage)
		}
		if s.waiting < 0 {
			t.Errorf("worker %s: vllm:num_requests_waiting %v", w, s.waiting)
		}
		if !s.hasLoraInfo || s.loraMax != "0" || s.loraRunning != "" || s.loraWait != "" {
			t.Errorf("worker %s: vllm:lora_requests_info %+v, want max_lora 0 and no adapters", w, s)
		}
	}
	cancel()
	<-streaming

	// SIGTERM: every worker keeps answering, with /health at 503, for the drain delay.
	e.mu.Lock()
	tok := e.procs["tokenizerd"]
	e.mu.Unlock()
	if err := syscall.Kill(-tok.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	draining := 0 // answers over fresh connections, which SO_REUSEPORT spreads over the workers
	for time.Since(sent) < 2500*time.Millisecond && draining < 4*workers {
		resp, err := freshClient.Get(e.base + "/health")
		if err != nil {
			t.Fatalf("%v after SIGTERM: /health refused (%v) before the drain delay ended", time.Since(sent), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 503 && strings.Contains(string(b), "draining"):
			draining++
		case time.Since(sent) > 500*time.Millisecond:
			t.Fatalf("%v after SIGTERM: /health %d %s, want 503 draining", time.Since(sent), resp.StatusCode, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if draining < 4*workers {
		t.Fatalf("%d draining answers from /health within 2.5 s of SIGTERM, want %d", draining, 4*workers)
	}
}
