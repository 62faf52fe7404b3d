package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmserve/llmserve/worker"
)

// A second engine on the port or the run directory of a live one fails at start with a clear
// message and exit status 78, and the live engine's ledger and service are untouched (issue 15,
// item 8).
func TestSecondEngineRefused(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 2})
	ledger := worker.LedgerPath(e.runDir)
	before, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	other := filepath.Join(t.TempDir(), "run") // created 0700 by the engine
	for _, c := range []struct {
		name, bin string
		args      []string
		want      string
	}{
		{"tokenizerd, same port, other run dir", "tokenizerd", []string{"serve", "--port", strconv.Itoa(e.port), "--run-dir", other}, "port " + strconv.Itoa(e.port) + " is in use"},
		{"tokenizerd, same run dir, other port", "tokenizerd", []string{"serve", "--port", strconv.Itoa(freePort(t)), "--run-dir", e.runDir, "--tokenizer-worker-num", "3"}, "run dir " + e.runDir + " is in use"},
		{"schedulerd, same run dir", "schedulerd", []string{"serve", "--port", strconv.Itoa(e.port), "--run-dir", e.runDir, "--dp-rank", "0"}, "run dir " + e.runDir + " is in use"},
		{"detokd, same run dir", "detokd", []string{"--port", strconv.Itoa(e.port), "--run-dir", e.runDir}, "run dir " + e.runDir + " is in use"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, c.bin), append(c.args, "--model-path", modelPath)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 78 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%s: exit %d (%v), output %.400q; want status 78 and %q", c.name, code, err, out.String(), c.want)
		}
	}
	after, err := os.ReadFile(ledger)
	if err != nil || !bytes.Equal(before[:64], after[:64]) || len(before) != len(after) {
		t.Errorf("the live engine's ledger changed (%d -> %d bytes, %v)", len(before), len(after), err)
	}
	r := generate(t, e, map[string]any{"input_ids": promptIDs, "sampling_params": map[string]any{"max_new_tokens": 3, "temperature": 0}})
	if len(r.OutputIDs) == 0 {
		t.Fatal("the live engine stopped serving")
	}
}
