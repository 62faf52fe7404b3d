package scheduler

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/tokenizer"
)

// editFile is the file of the code-editing workload: the prompt holds it, and the output
// rewrites part of it.
const editFile = `import os
import sys


def read_config(path):
    """Read a key=value config file into a dict."""
    config = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, value = line.split("=", 1)
            config[key.strip()] = value.strip()
    return config


def write_config(path, config):
    """Write a dict as a key=value config file."""
    with open(path, "w") as f:
        for key, value in sorted(config.items()):
            f.write(f"{key}={value}\n")


def main():
    if len(sys.argv) != 2:
        print("usage: config.py PATH")
        return 1
    config = read_config(sys.argv[1])
    for key, value in config.items():
        print(key, value)
    return 0
`

// specWorkloads are BenchmarkSpeculative's prompts: a code edit (the file, then its start
// again with a change, so the continuation is mostly a copy) and free text with few repeats.
func specWorkloads(tok *tokenizer.Tokenizer) map[string][]int32 {
	edit := "# config.py\n" + editFile + "\n\n# config.py, with read_config renamed to load_config:\n" +
		strings.Replace(editFile[:strings.Index(editFile, "    config = {}")], "read_config", "load_config", 1)
	free := "The history of the printing press begins in the fifteenth century, when movable type " +
		"changed how books were made across Europe. Before it, scribes copied each page by hand,"
	return map[string][]int32{"code-edit": tok.Encode(edit, false), "free-text": tok.Encode(free, false)}
}

// BenchmarkSpeculative decodes one request at a time (batch 1, greedy, 256 tokens) on pico,
// alternating rounds with speculation off and on (so load on the machine weighs on both
// alike), for each workload: tokens/s of each, their ratio, forward steps per token and the
// share of draft tokens accepted with speculation. Run under flock /tmp/perf.lock.
func BenchmarkSpeculative(b *testing.B) {
	dir := filepath.Join("..", "models", "pico")
	m, err := model.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	const gen = 256
	for name, prompt := range specWorkloads(tok) {
		b.Run(name, func(b *testing.B) {
			// One scheduler per mode for all rounds, as a server's: the step-cost model carries
			// over.
			var scheds [2]*Scheduler
			var secs [2]float64
			var tokens [2]int
			for i, mode := range []string{SpeculativeOff, SpeculativeNgram} {
				scheds[i] = newScheduler(b, newCPU(b, m, 256, 16), Config{MaxRunning: 1, MaxPrefillTokens: 2048,
					EOS: m.Generation.EOSTokenIDs, MaxModelLen: 4096, Speculative: mode})
			}
			round := 0
			for b.Loop() {
				for i, s := range scheds {
					round++
					start := time.Now()
					mustAdd(b, s, &Request{RID: rid(round), InputIDs: prompt, MaxNewTokens: gen, IgnoreEOS: true, Sampling: greedy()})
					for s.HasWork() {
						out, err := s.Step(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						for _, it := range out.Items {
							tokens[i] += len(it.NewIDs)
						}
					}
					secs[i] += time.Since(start).Seconds()
				}
			}
			off, on := float64(tokens[0])/secs[0], float64(tokens[1])/secs[1]
			st := scheds[1].Stats()
			b.ReportMetric(off, "off-tok/s")
			b.ReportMetric(on, "ngram-tok/s")
			b.ReportMetric(on/off, "speedup")
			b.ReportMetric(float64(st.Steps)/float64(tokens[1]), "steps/tok")
			if st.DraftTokens > 0 {
				b.ReportMetric(float64(st.AcceptedTokens)/float64(st.DraftTokens), "accepted/drafted")
			}
		})
	}
}
