// Command loadgen is an OpenAI-compatible streaming load generator that verifies every stream:
// it drives a server at a fixed concurrency or a Poisson arrival rate, measures throughput,
// TTFT and inter-token latency, and checks on every request that no token was lost, duplicated
// or miscounted (ids received = usage.completion_tokens = max_tokens, one finish, usage, [DONE]).
// It exits non-zero on any violation.
//
//	go run ./bench/loadgen -url http://127.0.0.1:30000 -concurrency 512 -requests 2048 -output-len 256
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"sort"
	"syscall"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the command and returns its exit status: 0 all verified, 1 violations, 2 usage
// or setup error.
func realMain(args []string, stdout, stderr io.Writer) int {
	cfg, opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	if opts.CPUProfile != "" {
		f, err := os.Create(opts.CPUProfile)
		if err != nil {
			fmt.Fprintln(stderr, "loadgen: cpu profile:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "loadgen: cpu profile:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	writeTable(stdout, &sum)
	if opts.JSON {
		b, err := json.Marshal(&sum)
		if err != nil {
			fmt.Fprintln(stderr, "loadgen: encode summary:", err)
			return 2
		}
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !sum.OK() {
		return 1
	}
	return 0
}

// shownViolations is how many examples the table prints.
const shownViolations = 5

// writeTable prints the human-readable summary.
func writeTable(w io.Writer, s *Summary) {
	mode := fmt.Sprintf("closed loop, concurrency %d", s.Concurrency)
	if s.Mode == "open" {
		mode = fmt.Sprintf("open loop, %.1f req/s (in-flight cap %d)", s.Rate, s.Concurrency)
	}
	fmt.Fprintf(w, "target      %s (%s, model %s)\n", s.URL, s.Endpoint, s.Model)
	fmt.Fprintf(w, "mode        %s, input %d, output %d tokens\n", mode, s.InputLen, s.OutputLen)
	fmt.Fprintf(w, "requests    %d started, %d completed, %d disconnected by client, %d failed, %.2fs\n",
		s.Requests, s.Completed, s.Disconnected, s.Failed, s.WallSeconds)
	fmt.Fprintf(w, "throughput  %.0f output tok/s, %.2f req/s, %d tokens\n", s.OutputTokPerSec, s.RequestsPerSec, s.OutputTokens)
	fmt.Fprintf(w, "chunks      %.2f per request, %.2f ids per chunk\n", s.ChunksPerRequest, s.IDsPerChunk)
	fmt.Fprintf(w, "%-11s %10s %10s %10s %10s %10s\n", "latency ms", "mean", "p50", "p90", "p99", "max")
	for _, row := range []struct {
		name string
		l    Latency
	}{{"TTFT", s.TTFT}, {"ITL", s.ITL}, {"E2E", s.E2E}} {
		fmt.Fprintf(w, "%-11s %10.2f %10.2f %10.2f %10.2f %10.2f\n", row.name, row.l.Mean, row.l.P50, row.l.P90, row.l.P99, row.l.Max)
	}
	if s.Drain != nil {
		fmt.Fprintf(w, "drain       %s\n", s.Drain)
	}
	if s.OK() {
		fmt.Fprintf(w, "verified    all %d finished streams exact\n", s.Completed)
		return
	}
	kinds := make([]string, 0, len(s.ViolationKinds))
	for k := range s.ViolationKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintf(w, "VIOLATIONS  %d:", s.Violations)
	for _, k := range kinds {
		fmt.Fprintf(w, " %s=%d", k, s.ViolationKinds[k])
	}
	fmt.Fprintln(w)
	for i, v := range s.FirstViolations {
		if i == shownViolations {
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
}
