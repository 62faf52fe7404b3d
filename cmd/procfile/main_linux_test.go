package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmserve/llmserve/cmd/internal/supervise"
)

// runnerEnv names the Procfile that this test binary, started again by
// TestRunnerDeathStopsProcesses, runs as the runner.
const runnerEnv = "PROCFILE_TEST_RUNNER"

// A runner killed with SIGKILL leaves no process behind: each gets SIGTERM from the kernel.
func TestRunnerDeathStopsProcesses(t *testing.T) {
	if path := os.Getenv(runnerEnv); path != "" {
		if err := run(path, 5*time.Second, slog.New(slog.DiscardHandler)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir := t.TempDir()
	var procfile strings.Builder
	names := []string{"a", "b"}
	for _, n := range names {
		// The shell writes its pid, then execs: the pid is the process the runner started.
		pidFile := filepath.Join(dir, n+".pid")
		fmt.Fprintf(&procfile, "%s: echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 300\n", n, pidFile, pidFile, pidFile)
	}
	path := filepath.Join(dir, "Procfile")
	if err := os.WriteFile(path, []byte(procfile.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runner := exec.Command(os.Args[0], "-test.run=^TestRunnerDeathStopsProcesses$")
	runner.Env = append(os.Environ(), runnerEnv+"="+path)
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runner.Process.Kill(); _ = runner.Wait() })

	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range names {
		for {
			b, err := os.ReadFile(filepath.Join(dir, n+".pid"))
			if err == nil {
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatalf("%s.pid: %v", n, err)
				}
				pids = append(pids, pid)
				t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %s did not start in 10s", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("process %d is not running before the runner is killed", pid)
		}
	}

	if err := runner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = runner.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs 10s after its runner was killed", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// alive says whether pid is a process that has not exited (a zombie has: only its parent, now
// whichever process adopted it, has yet to reap it).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// A process that exits 78 (a configuration error) stops the runner at once, not restarted, and
// the runner returns the refusal, which main turns into its own exit status 78.
func TestRefusalStopsRunner(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "Procfile")
	count := filepath.Join(dir, "count")
	procfile := fmt.Sprintf("bad: echo x >> %s; echo 'load config: open /nonexistent/config.json: no such file' >&2; exit 78\nok: exec sleep 300\n", count)
	if err := os.WriteFile(path, []byte(procfile), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := run(path, 5*time.Second, slog.New(slog.DiscardHandler))
	var refused *supervise.RefusedError
	if !errors.As(err, &refused) || refused.Name != "bad" {
		t.Fatalf("run returned %v, want bad's refusal", err)
	}
	if b, _ := os.ReadFile(count); strings.Count(string(b), "x") != 1 {
		t.Fatalf("bad started %d times, want once", strings.Count(string(b), "x"))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("runner took %v to stop", d)
	}
}
