package main

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/bench/internal/tokseq"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, opts, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opts.JSON || cfg.Concurrency != 64 || cfg.Requests != 256 || cfg.OutputLen != 256 || cfg.Vocab != 8192 || !cfg.IgnoreEOS || cfg.Progress != time.Second {
		t.Errorf("defaults %+v", cfg)
	}
	cfg, _, err = parseFlags([]string{"-rate", "50", "-duration", "2s", "-expect-sequence", "prompt:1,100"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Concurrency != 0 || cfg.Requests != 0 || cfg.ExpectSequence == nil || cfg.ExpectSequence.Kind != tokseq.PromptKeyed {
		t.Errorf("rate mode %+v", cfg)
	}
	cfg, _, err = parseFlags([]string{"-rate", "50", "-concurrency", "8", "-url", "http://[::1]:8000"}, io.Discard)
	if err != nil || cfg.Concurrency != 8 {
		t.Errorf("rate with explicit cap: %+v %v", cfg, err)
	}
}

func TestParseFlagsRejects(t *testing.T) {
	for _, args := range [][]string{
		{"-url", "http://10.0.0.1:30000"},
		{"-url", "ftp://127.0.0.1"},
		{"-endpoint", "embeddings"},
		{"-concurrency", "0"},
		{"-output-len", "0"},
		{"-stream-interval", "-1"},
		{"-disconnect-frac", "1.5"},
		{"-expect-sequence", "affine:1"},
		{"-expect-sequence", "prompt:1,10", "-text-prompts"},
		{"-request-timeout", "0s"},
		{"stray"},
	} {
		if _, _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	if _, _, err := parseFlags([]string{"-url", "http://10.0.0.1:30000", "-allow-remote"}, io.Discard); err != nil {
		t.Errorf("-allow-remote: %v", err)
	}
}

func TestPlanBody(t *testing.T) {
	g := &generator{cfg: Config{InputLen: 5, OutputLen: 9, Vocab: 10, IgnoreEOS: true, StreamInterval: 3, Seed: 1, Endpoint: "completions", DisconnectFrac: 1}, model: "m"}
	p := g.plan(3)
	body := string(p.body)
	for _, want := range []string{`"model":"m"`, `"prompt":[`, `"max_tokens":9`, `"stream":true`, `"stream_options":{"include_usage":true}`, `"return_token_ids":true`, `"ignore_eos":true`, `"stream_interval":3`} {
		if !strings.Contains(body, want) {
			t.Errorf("body %s lacks %s", body, want)
		}
	}
	if !strings.HasSuffix(strings.SplitN(body, "]", 2)[0], ","+strconv.FormatInt(p.promptKey, 10)) {
		t.Errorf("prompt key %d is not the last prompt id in %s", p.promptKey, body)
	}
	if p.disconnectAt < 0 || p.disconnectAt >= 9 {
		t.Errorf("disconnect point %d", p.disconnectAt)
	}
	if again := g.plan(3); string(again.body) != body {
		t.Errorf("plans are not reproducible")
	}
	g.cfg.Endpoint = "chat"
	if body := string(g.plan(0).body); !strings.Contains(body, `"messages":[{"role":"user","content":"`) {
		t.Errorf("chat body %s", body)
	}
}
