package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runScript is an engine started as `make run` starts it (scripts/run.sh and bin/procfile),
// from binaries built once for the tests.
type runScript struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    *syncBuffer
	runDir string
	base   string
	env    []string
}

func startRunScript(t *testing.T, port int, runDir string) *runScript {
	t.Helper()
	m := &runScript{t: t, out: &syncBuffer{}, runDir: runDir, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	m.env = append(os.Environ(), "LLMSERVE_BIN="+binDir, "MODEL_PATH="+modelPath, "PORT="+strconv.Itoa(port),
		"LLMSERVE_RUN_DIR="+runDir, "OPENBLAS_NUM_THREADS=1", "LOG_LEVEL=debug", "SHUTDOWN_TIMEOUT=2s")
	m.cmd = exec.Command("../scripts/run.sh")
	m.cmd.Env = m.env
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = m.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("make run did not stop within 20 s of SIGTERM")
			for _, role := range []string{"tokenizerd", "detokd", "schedulerd-0"} {
				if pid := m.pid(role); pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			_ = m.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("---- make run output ----\n%s", tail(m.out.String(), 6000))
		}
	})
	return m
}

// pid reads the pid a role's process wrote into its run-dir lock.
func (m *runScript) pid(role string) int {
	b, _ := os.ReadFile(filepath.Join(m.runDir, role+".lock"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// served waits until a generate request succeeds and returns how long that took.
func (m *runScript) served(timeout time.Duration) time.Duration {
	m.t.Helper()
	start := time.Now()
	body := `{"input_ids":[400,1234,87],"sampling_params":{"max_new_tokens":2,"temperature":0}}`
	for time.Since(start) < timeout {
		resp, err := freshClient.Post(m.base+"/generate", "application/json", strings.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.t.Fatalf("not serving %v after start/kill", timeout)
	return 0
}

// `make run` supervises every process (issue 15, item 9): a killed schedulerd or detokd is
// restarted and the engine serves again; the Procfile runner listens on nothing (item 3); and a
// second `make run` on the same run dir fails with a clear message without touching the live
// engine's Procfile (item 8).
func TestMakeRunSupervises(t *testing.T) {
	port := freePort(t)
	m := startRunScript(t, port, filepath.Join(t.TempDir(), "run"))
	t.Logf("first served after %v", m.served(60*time.Second))

	runner := m.cmd.Process.Pid // run.sh execs procfile
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", runner))
	for _, fd := range fds {
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", runner, fd.Name())); strings.HasPrefix(link, "socket:") {
			t.Errorf("the Procfile runner holds a socket (fd %s): it must have no control port", fd.Name())
		}
	}

	for _, role := range []string{"schedulerd-0", "detokd"} {
		old := m.pid(role)
		if old <= 0 {
			t.Fatalf("%s: no pid in its lock", role)
		}
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", role, err)
		}
		time.Sleep(200 * time.Millisecond)
		took := m.served(30 * time.Second)
		if now := m.pid(role); now == old || now <= 0 {
			t.Fatalf("%s: pid %d -> %d: not restarted", role, old, now)
		}
		t.Logf("%s killed: served again after %v", role, took)
	}

	procfile := filepath.Join(m.runDir, "Procfile")
	before, _ := os.ReadFile(procfile)
	second := exec.Command("../scripts/run.sh")
	second.Env = append(m.env, "DP_SIZE=2")
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another engine") {
		t.Errorf("second make run on the same run dir: %v, %s", err, out)
	}
	if after, _ := os.ReadFile(procfile); !bytes.Equal(before, after) {
		t.Errorf("the live engine's Procfile was replaced:\n%s", after)
	}
	m.served(5 * time.Second)
}

// children lists the pids whose parent is pid.
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// `make run` recovers from what an operator or the OOM killer does (issue 29, item 6): the
// tokenizerd supervisor killed outright takes its workers with it and the Procfile runner
// restarts it; a deleted run directory makes every process exit and come back on a fresh one,
// so a process that restarts later (detokd killed) can reach the others again.
func TestMakeRunRecovers(t *testing.T) {
	port := freePort(t)
	m := startRunScript(t, port, filepath.Join(t.TempDir(), "run"))
	m.served(60 * time.Second)

	sup := m.pid("tokenizerd")
	workers := children(sup)
	if sup <= 0 || len(workers) == 0 {
		t.Fatalf("tokenizerd supervisor pid %d, workers %v", sup, workers)
	}
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, w := range workers {
		for alive(w) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(w) {
			t.Errorf("worker %d outlived its supervisor by 5 s", w)
		}
	}
	took := m.served(30 * time.Second)
	if now := m.pid("tokenizerd"); now == sup || now <= 0 {
		t.Fatalf("tokenizerd supervisor: pid %d -> %d: not restarted", sup, now)
	}
	t.Logf("supervisor killed: served again after %v", took)

	detokd := m.pid("detokd")
	if err := os.RemoveAll(m.runDir); err != nil {
		t.Fatal(err)
	}
	// Every process notices within its watch period and is restarted on a fresh directory; a
	// detokd killed after that (the one now running, or the one from before if none came
	// back) is restarted and finds the others.
	deadline = time.Now().Add(10 * time.Second)
	for m.pid("detokd") <= 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if pid := m.pid("detokd"); pid > 0 {
		detokd = pid
	}
	_ = syscall.Kill(detokd, syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond)
	took = m.served(60 * time.Second)
	t.Logf("run dir deleted: served again after %v", took)
	if !strings.Contains(m.out.String(), "run directory was deleted") {
		t.Error("no process said that its run directory was deleted")
	}
}
