package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PORT=0 asks for a free port: every worker listens on the one port the supervisor resolved,
// and the logs name it, not ":0" (issue 29, item 8).
func TestPortZeroNamesTheBoundPort(t *testing.T) {
	runDir := filepath.Join(t.TempDir(), "run")
	cmd := exec.Command(filepath.Join(binDir, "tokenizerd"), "serve", "--model-path", modelPath, "--run-dir", runDir,
		"--tokenizer-worker-num", "2", "--log-level", "info")
	cmd.Env = append(os.Environ(), "PORT=0")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	ready := regexp.MustCompile(`tokenizer worker ready.*?addr=(\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	var addrs []string
	for time.Now().Before(deadline) {
		addrs = nil
		for _, m := range ready.FindAllStringSubmatch(log.String(), -1) {
			addrs = append(addrs, m[1])
		}
		if len(addrs) == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(addrs) != 2 || addrs[0] != addrs[1] || strings.HasSuffix(addrs[0], ":0") {
		t.Fatalf("workers ready on %v, want both on one real port:\n%s", addrs, tail(log.String(), 3000))
	}
	resp, err := http.Get("http://" + addrs[0] + "/health")
	if err != nil {
		t.Fatalf("nothing answers on the logged address %s: %v", addrs[0], err)
	}
	resp.Body.Close()
}

// An address that cannot be listened on is a configuration error (exit status 78) that says
// why, not that another program holds the port (issue 29, item 8).
func TestListenErrorSaysWhy(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unresolvable host", []string{"--host", "no-such-host.invalid", "--port", "30999"}, "no-such-host.invalid"},
		{"address of another machine", []string{"--host", "192.0.2.1", "--port", "30999"}, "cannot assign requested address"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tokenizerd"), append([]string{"serve", "--model-path", modelPath,
			"--run-dir", filepath.Join(t.TempDir(), "run")}, c.args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 78 || !strings.Contains(out.String(), c.want) || !strings.Contains(out.String(), "cannot listen") || strings.Contains(out.String(), "another program") {
			t.Errorf("%s: exit %d, output %.400q; want status 78 saying %q", c.name, code, out.String(), c.want)
		}
	}
}
