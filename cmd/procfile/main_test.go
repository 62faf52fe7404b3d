package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := parse(strings.NewReader("# engine\nschedulerd0: DP_RANK=0 exec x serve --a b:c\n\n  detokd :exec y\n"))
	if err != nil || len(got) != 2 || got[0] != (entry{"schedulerd0", "DP_RANK=0 exec x serve --a b:c"}) || got[1] != (entry{"detokd", "exec y"}) {
		t.Fatalf("%+v %v", got, err)
	}
	for _, bad := range []string{"", "# only\n", "noseparator\n", ": cmd\n", "a:\n", "a b: c\n", "a: x\na: y\n"} {
		if _, err := parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Lines from two processes never interleave within a line, and each carries its prefix.
func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	a := &lineWriter{prefix: "a | ", mu: &mu, w: &out}
	b := &lineWriter{prefix: "b | ", mu: &mu, w: &out}
	a.Write([]byte("one "))
	b.Write([]byte("two\nthr"))
	a.Write([]byte("half\n"))
	b.Write([]byte("ee\n"))
	if want := "b | two\na | one half\nb | three\n"; out.String() != want {
		t.Fatalf("%q, want %q", out.String(), want)
	}
}

// In JSON mode a process's JSON lines pass unprefixed, its other lines become JSON naming it.
func TestLineWriterJSON(t *testing.T) {
	jsonLines = true
	defer func() { jsonLines = false }()
	var out bytes.Buffer
	var mu sync.Mutex
	a := &lineWriter{name: "tokenizerd", prefix: "tokenizerd | ", mu: &mu, w: &out}
	a.Write([]byte(`{"level":"INFO","msg":"ready","proc":"tokenizerd"}` + "\npanic: boom\n"))
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || lines[0] != `{"level":"INFO","msg":"ready","proc":"tokenizerd"}` {
		t.Fatalf("%q", out.String())
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(lines[1]), &m); err != nil || m["msg"] != "panic: boom" || m["proc"] != "tokenizerd" {
		t.Fatalf("wrapped line %q: %v", lines[1], err)
	}
	if got := a.lastLines(); !strings.HasSuffix(got, "panic: boom") {
		t.Fatalf("last lines %q", got)
	}
}
