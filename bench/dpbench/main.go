// Command dpbench measures data-parallel dispatch on a running engine: it drives the load with
// the loadgen binary (throughput, TTFT) and meanwhile samples GET /get_load every 50 ms to
// record how unevenly the ranks are loaded over time (per sample: the largest rank's
// running+waiting over the mean across ranks that are up; 1.0 is perfect balance). It starts
// no engine itself; run.sh in this directory starts one per configuration from the built
// binaries (replay ranks) and prints the table:
//
//	go build -o /tmp/bin/ ./cmd/... ./bench/loadgen ./bench/dpbench
//	bench/dpbench/run.sh /tmp/bin            # R = 1, 2, 4 x methods x C = 256, 1024
//
// One configuration by hand, against an engine on port 33000:
//
//	dpbench -url http://127.0.0.1:33000 -loadgen /tmp/bin/loadgen -label R=4 -- \
//	    -concurrency 256 -requests 1024 -input-len 128 -output-len 64
//
// It prints one JSON line (Result) on stdout and exits non-zero if loadgen found violations.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/llmserve/llmserve/shard"
)

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

// Result is one run: loadgen's headline numbers and the sampled imbalance.
type Result struct {
	Label           string    `json:"label"`
	Method          string    `json:"method"`
	Ranks           int       `json:"ranks"`
	Concurrency     int       `json:"concurrency"`
	Requests        int       `json:"requests"`
	Completed       int       `json:"completed"`
	Failed          int       `json:"failed"`
	WallSeconds     float64   `json:"wall_s"`
	OutputTokPerSec float64   `json:"output_tok_per_s"`
	TTFTP50ms       float64   `json:"ttft_p50_ms"`
	TTFTP99ms       float64   `json:"ttft_p99_ms"`
	Imbalance       Imbalance `json:"imbalance"`
	// Steady is the same over the samples where the ranks together held at least -min-total
	// requests: the ramp-up and the drain at the end, where a few requests on one rank make
	// any ratio large, are left out of its ratios (its peak rank load is the whole run's).
	Steady Imbalance `json:"steady"`
}

// Imbalance summarizes max/mean of the per-rank running+waiting over the samples taken while
// the engine held work (samples where every rank was idle say nothing about balance).
type Imbalance struct {
	Samples int     `json:"samples"`
	Mean    float64 `json:"mean"`
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	Max     float64 `json:"max"`
	// PeakRank is the most requests (running+waiting) any one rank held in any sample, and
	// PeakMean the mean across ranks in that sample.
	PeakRank int     `json:"peak_rank"`
	PeakMean float64 `json:"peak_mean"`
	// Errors counts /get_load polls that failed.
	Errors int `json:"errors"`
}

// loadView is the part of /get_load that dpbench reads (worker.LoadReport's dispatch table).
type loadView struct {
	Dispatch shard.Snapshot `json:"dispatch"`
}

// ratioTotal returns max/mean of running+waiting over the ranks that are up, the largest
// rank's load, the mean and the total; ok is false when no rank is up or all are idle.
func ratioTotal(s *shard.Snapshot) (r float64, peak int, mean float64, total int, ok bool) {
	var sum, n int
	for _, rk := range s.Ranks {
		if !rk.Up {
			continue
		}
		l := rk.Reported.Running + rk.Reported.Waiting
		sum += l
		n++
		peak = max(peak, l)
	}
	if n == 0 || sum == 0 {
		return 0, 0, 0, 0, false
	}
	mean = float64(sum) / float64(n)
	return float64(peak) / mean, peak, mean, sum, true
}

// summarize turns the per-sample ratios into an Imbalance.
func summarize(ratios []float64, peak int, peakMean float64, errs int) Imbalance {
	im := Imbalance{Samples: len(ratios), PeakRank: peak, PeakMean: peakMean, Errors: errs}
	if len(ratios) == 0 {
		return im
	}
	s := slices.Clone(ratios)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	q := func(p float64) float64 { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	im.Mean, im.P50, im.P99, im.Max = sum/float64(len(s)), q(0.50), q(0.99), s[len(s)-1]
	return im
}

// sample polls url every period until ctx ends; steady covers the samples with at least
// minTotal requests on the ranks.
func sample(ctx context.Context, url string, period time.Duration, minTotal int) (all, steady Imbalance, method string, ranks int) {
	client := &http.Client{Timeout: 2 * time.Second}
	var ratios, steadyRatios []float64
	var peak, errs int
	var peakMean float64
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return summarize(ratios, peak, peakMean, errs), summarize(steadyRatios, peak, peakMean, errs), method, ranks
		case <-t.C:
		}
		var v loadView
		if err := getJSON(ctx, client, url, &v); err != nil {
			if ctx.Err() == nil {
				errs++
			}
			continue
		}
		method, ranks = v.Dispatch.Method, len(v.Dispatch.Ranks)
		r, p, m, total, ok := ratioTotal(&v.Dispatch)
		if !ok {
			continue
		}
		ratios = append(ratios, r)
		if total >= minTotal {
			steadyRatios = append(steadyRatios, r)
		}
		if p > peak {
			peak, peakMean = p, m
		}
	}
}

func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// loadgenSummary is the part of loadgen's -json line that dpbench reports.
type loadgenSummary struct {
	Concurrency     int     `json:"concurrency"`
	Requests        int     `json:"requests"`
	Completed       int     `json:"completed"`
	Failed          int     `json:"failed"`
	WallSeconds     float64 `json:"wall_s"`
	OutputTokPerSec float64 `json:"output_tok_per_s"`
	TTFT            struct {
		P50 float64 `json:"p50_ms"`
		P99 float64 `json:"p99_ms"`
	} `json:"ttft"`
}

// parseLoadgen finds loadgen's JSON summary: the last stdout line that is a JSON object.
func parseLoadgen(out []byte) (loadgenSummary, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var s loadgenSummary
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			return s, fmt.Errorf("parse loadgen summary %q: %w", l, err)
		}
		return s, nil
	}
	return loadgenSummary{}, errors.New("loadgen printed no JSON summary")
}

func realMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dpbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://127.0.0.1:30000", "engine base URL")
	loadgen := fs.String("loadgen", "loadgen", "path of the loadgen binary (go build ./bench/loadgen)")
	period := fs.Duration("sample", 50*time.Millisecond, "/get_load sampling period")
	label := fs.String("label", "", "free-form label copied into the result")
	minTotal := fs.Int("min-total", 1, "the steady imbalance counts samples with at least this many requests on the ranks (e.g. half the concurrency)")
	var mt multiTurnConfig
	multiturn := fs.Bool("multiturn", false, "run the multi-turn shared-prefix trace instead of loadgen (see multiturn.go)")
	fs.IntVar(&mt.Conversations, "conversations", 32, "-multiturn: conversations at once")
	fs.IntVar(&mt.Turns, "turns", 6, "-multiturn: turns per conversation")
	fs.IntVar(&mt.Groups, "groups", 4, "-multiturn: system prompts (conversation c has system prompt c mod groups)")
	fs.IntVar(&mt.SystemLen, "system-len", 512, "-multiturn: system prompt tokens")
	fs.IntVar(&mt.UserLen, "user-len", 64, "-multiturn: tokens of each user turn")
	fs.IntVar(&mt.OutputLen, "output-len", 32, "-multiturn: tokens of each reply")
	fs.BoolVar(&mt.Oracle, "oracle", false, "-multiturn: pin conversation c to rank c mod R (the sticky oracle)")
	fs.DurationVar(&mt.Sample, "mt-sample", time.Second, "-multiturn: max/min running sampling period")
	fs.Uint64Var(&mt.Seed, "seed", 1, "-multiturn: token seed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dpbench [flags] -- [loadgen flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *period <= 0 {
		fmt.Fprintln(stderr, "dpbench: -sample must be positive")
		return 2
	}
	base := strings.TrimRight(*url, "/")
	// Fail early, with a clear message, when there is no engine.
	var probe loadView
	if err := getJSON(context.Background(), &http.Client{Timeout: 5 * time.Second}, base+"/get_load", &probe); err != nil {
		fmt.Fprintf(stderr, "dpbench: engine at %s: %v\n", base, err)
		return 2
	}

	if *multiturn {
		if mt.Conversations < 1 || mt.Turns < 1 || mt.Groups < 1 || mt.SystemLen < 0 || mt.UserLen < 1 || mt.OutputLen < 1 || mt.Sample <= 0 {
			fmt.Fprintln(stderr, "dpbench: -conversations, -turns, -groups, -user-len, -output-len and -mt-sample must be positive")
			return 2
		}
		res, err := runMultiTurn(base, *label, mt)
		if err != nil {
			fmt.Fprintf(stderr, "dpbench: %v\n", err)
			return 2
		}
		b, _ := json.Marshal(&res)
		fmt.Fprintf(stdout, "%s\n", b)
		if res.Failed > 0 {
			return 1
		}
		return 0
	}

	lgArgs := append([]string{"-url", base, "-json", "-progress", "0"}, fs.Args()...)
	cmd := exec.Command(*loadgen, lgArgs...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	ctx, stop := context.WithCancel(context.Background())
	type sampled struct {
		all, steady Imbalance
		method      string
		ranks       int
	}
	done := make(chan sampled, 1)
	go func() {
		a, st, m, r := sample(ctx, base+"/get_load", *period, *minTotal)
		done <- sampled{a, st, m, r}
	}()
	runErr := cmd.Run()
	stop()
	smp := <-done
	sum, err := parseLoadgen(out.Bytes())
	if err != nil {
		fmt.Fprintf(stderr, "dpbench: loadgen %v: %v\noutput:\n%s", runErr, err, out.Bytes())
		return 2
	}
	res := Result{Label: *label, Method: smp.method, Ranks: smp.ranks, Concurrency: sum.Concurrency,
		Requests: sum.Requests, Completed: sum.Completed, Failed: sum.Failed, WallSeconds: sum.WallSeconds,
		OutputTokPerSec: sum.OutputTokPerSec, TTFTP50ms: sum.TTFT.P50, TTFTP99ms: sum.TTFT.P99, Imbalance: smp.all, Steady: smp.steady}
	b, _ := json.Marshal(&res)
	fmt.Fprintf(stdout, "%s\n", b)
	if runErr != nil {
		fmt.Fprintf(stderr, "dpbench: loadgen: %v\n", runErr)
		return 1
	}
	return 0
}
