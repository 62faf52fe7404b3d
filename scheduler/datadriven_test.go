package scheduler

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The data-driven scheduler tests (in the style of etcd/raft's): each file under
// testdata/steps is a script of commands, each followed by "----" and the scheduler's state
// after it, as text:
//
//	new blocks=10 block-size=4 max-running=2 budget=8 [chunk=4] [vocab=1000]
//	add <rid> prompt=<n> max-new=<n> [like=<rid>] [seed=<k>]
//	step [n=<k>]
//	abort <rid>
//
// like=<rid> gives the request the other's prompt (a prefix hit); seed picks another prompt.
// After each command the output lists the items the command produced ("a +2" for two new
// ids, "done <reason>" when it finished), then every live request (running first, in the
// scheduler's order) with its computed/total positions and block count, then the KV blocks in
// use. With -rewrite the expected outputs are replaced by what the scheduler does now.

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/steps with the current outputs")

func TestDataDriven(t *testing.T) {
	files, err := filepath.Glob("testdata/steps/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts under testdata/steps: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) { runScript(t, path) })
	}
}

// scriptCase is one command and its expected output.
type scriptCase struct {
	line    int    // of the command, for messages
	comment string // lines before the command, kept on rewrite
	cmd     string
	want    string
}

func parseScript(t *testing.T, path string) []scriptCase {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var cases []scriptCase
	for i := 0; i < len(lines); i++ {
		var c scriptCase
		for ; i < len(lines) && (lines[i] == "" || strings.HasPrefix(lines[i], "#")); i++ {
			c.comment += lines[i] + "\n"
		}
		if i == len(lines) {
			break
		}
		c.line, c.cmd = i+1, lines[i]
		if i++; i == len(lines) || lines[i] != "----" {
			t.Fatalf("%s:%d: command %q not followed by ----", path, c.line, c.cmd)
		}
		var want []string
		for i++; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		c.want = strings.Join(want, "\n")
		cases = append(cases, c)
	}
	return cases
}

func runScript(t *testing.T, path string) {
	cases := parseScript(t, path)
	var out strings.Builder
	var d driver
	for _, c := range cases {
		got, err := d.run(t, c.cmd)
		if err != nil {
			got = "error: " + err.Error()
		}
		if *rewrite {
			fmt.Fprintf(&out, "%s%s\n----\n%s\n\n", c.comment, c.cmd, got)
			continue
		}
		if got != c.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, c.line, c.cmd, got, c.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// driver holds one script's scheduler.
type driver struct {
	s       *Scheduler
	vocab   int
	prompts map[string][]int32
}

func args(fields []string) (map[string]int, error) {
	m := map[string]int{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("argument %q is not key=value", f)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			m[k+":"+v] = 1 // a word value (like=a)
			continue
		}
		m[k] = n
	}
	return m, nil
}

func (d *driver) run(t *testing.T, line string) (string, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", fmt.Errorf("empty command")
	}
	var items []Item
	switch fields[0] {
	case "new":
		a, err := args(fields[1:])
		if err != nil {
			return "", err
		}
		d.vocab = 1000
		if a["vocab"] > 0 {
			d.vocab = a["vocab"]
		}
		b := newReplay(t, d.vocab, a["blocks"], a["block-size"])
		d.s, err = New(b, Config{MaxRunning: a["max-running"], MaxPrefillTokens: a["budget"], ChunkSize: a["chunk"], MaxModelLen: 4096})
		if err != nil {
			return "", err
		}
		d.prompts = map[string][]int32{}
		return d.state(nil), nil
	case "add":
		if len(fields) < 2 {
			return "", fmt.Errorf("add needs a rid")
		}
		rid := fields[1]
		a, err := args(fields[2:])
		if err != nil {
			return "", err
		}
		p := prompt(len(d.prompts)+a["seed"], a["prompt"], d.vocab)
		for k := range a {
			if like, ok := strings.CutPrefix(k, "like:"); ok {
				p = append([]int32(nil), d.prompts[like]...)
			}
		}
		d.prompts[rid] = p
		if err := d.s.Add(&Request{RID: rid, InputIDs: p, MaxNewTokens: a["max-new"], IgnoreEOS: true, Sampling: greedy()}); err != nil {
			return "", err
		}
	case "step":
		a, err := args(fields[1:])
		if err != nil {
			return "", err
		}
		n := max(a["n"], 1)
		for range n {
			out, err := d.s.Step(context.Background())
			if err != nil {
				return "", err
			}
			items = append(items, out.Items...)
		}
	case "abort":
		if len(fields) != 2 {
			return "", fmt.Errorf("abort needs one rid")
		}
		d.s.Abort(fields[1])
	default:
		return "", fmt.Errorf("unknown command %q", fields[0])
	}
	return d.state(items), nil
}

// state renders the items of the command and the scheduler's requests and blocks.
func (d *driver) state(items []Item) string {
	var b strings.Builder
	if len(items) > 0 {
		b.WriteString("items:")
		for _, it := range items {
			fmt.Fprintf(&b, " %s +%d", it.RID, len(it.NewIDs))
			if it.Finished {
				fmt.Fprintf(&b, " done %v", it.FinishReason)
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	for _, q := range []struct {
		name string
		reqs []*liveRequest
	}{{"running", d.s.running}, {"waiting", d.s.waiting}} {
		fmt.Fprintf(&b, "%s:", q.name)
		for _, st := range q.reqs {
			fmt.Fprintf(&b, " %s %d/%d blocks=%d", st.req.RID, st.computed, len(st.tokens), len(st.blocks))
			if st.cached > 0 {
				fmt.Fprintf(&b, " cached=%d", st.cached)
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	l := d.s.Load()
	fmt.Fprintf(&b, "kv: %d/%d tokens, %d pending finishes; preemptions %d, prefix hits %d", l.KVTokensUsed, l.KVTokensCapacity, len(d.s.pending), d.s.stats.Preemptions, d.s.stats.PrefixHitTokens)
	return b.String()
}
