package runflags

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/shard"
	"github.com/urfave/cli/v3"
)

// parse runs a command with c's flags on args, as a binary's main does.
func parse(t *testing.T, c *Config, args ...string) {
	t.Helper()
	cmd := &cli.Command{Name: "x", Flags: c.Flags(), Action: func(context.Context, *cli.Command) error { return nil }}
	if err := cmd.Run(context.Background(), append([]string{"x"}, args...)); err != nil {
		t.Fatal(err)
	}
}

func TestFlagsFillFieldsWithDefaults(t *testing.T) {
	var c Config
	parse(t, &c)
	want := Config{ModelPath: "models/pico", Port: 30000, TokenizerWorkerNum: 1, DPSize: 1,
		GrammarMaxSchemaBytes: 1 << 20, GrammarMaxGBNFBytes: 128 << 10, GrammarMaxDepth: 64, GrammarCacheMB: 64, GrammarWhitespace: "compact",
		GrammarStrict: true, SchedulingPolicy: "fcfs", LogLevel: "info", LogFormat: "text", Remote: Remote{ZMQPort: 5600, PeerTimeout: 8 * time.Second}}
	if c != want {
		t.Fatalf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("DP_SIZE", "3")
	t.Setenv("SKIP_DETOKENIZATION", "true")
	t.Setenv("LLMSERVE_PORT", "31000")
	t.Setenv("GRAMMAR_MAX_GBNF_BYTES", "4096")
	var c Config
	parse(t, &c, "--tokenizer-worker-num", "4", "--grammar-whitespace", "flexible", "--grammar-strict=false",
		"--run-dir", "/tmp/x", "--grammar-cache-mb", "2")
	if c.DPSize != 3 || !c.SkipDetokenization || c.Port != 31000 || c.TokenizerWorkerNum != 4 || c.RunDirPath() != "/tmp/x" {
		t.Fatalf("parsed %+v", c)
	}
	o, err := c.GrammarOptions()
	if err != nil || o.Whitespace != grammar.Flexible || o.Strict || o.CacheBytes != 2<<20 || o.Limits.MaxGBNFBytes != 4096 {
		t.Fatalf("grammar options %+v, %v", o, err)
	}
}

func TestCheck(t *testing.T) {
	for _, bad := range [][]string{{"--dp-size", "0"}, {"--tokenizer-worker-num", "257"}} {
		var c Config
		parse(t, &c, bad...)
		if c.Check() == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	var c Config
	parse(t, &c, "--grammar-whitespace", "loose")
	if _, err := c.GrammarOptions(); err == nil {
		t.Error("--grammar-whitespace loose accepted")
	}
	for _, bad := range []string{"0", "-1", "67108865"} {
		var c Config
		parse(t, &c, "--grammar-max-gbnf-bytes", bad)
		if _, err := c.GrammarOptions(); err == nil || !strings.Contains(err.Error(), "--grammar-max-gbnf-bytes") {
			t.Errorf("--grammar-max-gbnf-bytes %s: %v, want it refused naming the flag", bad, err)
		}
	}
}

// TestLogFormat: --log-format json writes one JSON object a line with the process tag; text
// writes key=value lines; anything else, and a bad level, are refused by Check.
func TestLogFormat(t *testing.T) {
	var c Config
	parse(t, &c, "--log-format", "json", "--log-level", "debug")
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c.logger(&buf, "detokd").Debug("request finished", "request_id", "abc")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("json line %q: %v", buf.String(), err)
	}
	if line["msg"] != "request finished" || line["proc"] != "detokd" || line["request_id"] != "abc" || line["level"] != "DEBUG" {
		t.Errorf("json line %v", line)
	}
	buf.Reset()
	c.LogFormat = "text"
	c.logger(&buf, "detokd").Info("hello", "request_id", "abc")
	if s := buf.String(); !strings.Contains(s, "msg=hello proc=detokd request_id=abc") {
		t.Errorf("text line %q", s)
	}
	for _, bad := range []Config{{LogFormat: "xml"}, {LogLevel: "loud"}} {
		bad.TokenizerWorkerNum, bad.DPSize = 1, 1
		if err := bad.Check(); err == nil {
			t.Errorf("%+v passed Check", bad)
		}
	}
}

// JSON log lines carry durations in seconds under a _seconds key and enums by name.
func TestJSONLogValues(t *testing.T) {
	var buf bytes.Buffer
	c := Config{LogLevel: "info", LogFormat: "json"}
	c.logger(&buf, "x").Info("m", "rank_timeout", 1500*time.Millisecond, "method", shard.ShortestQueue, "n", 3)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["rank_timeout_seconds"] != 1.5 || m["method"] != shard.ShortestQueue.String() || m["n"] != 3.0 {
		t.Fatalf("line %s", buf.String())
	}
}
