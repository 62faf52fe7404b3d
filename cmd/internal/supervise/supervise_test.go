package supervise

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process that exits is started again, with growing pauses; one that exits 78 is not.
func TestRunRestartsAndGivesUp(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	// Each start appends a line; the third exits 78.
	script := `echo x >> ` + count + `; n=$(wc -l < ` + count + `); [ "$n" -ge 3 ] && exit 78; exit 1`
	start := time.Now()
	err := Run(context.Background(), "t", func() *exec.Cmd { return exec.Command("/bin/sh", "-c", script) }, time.Second, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "78") {
		t.Fatalf("err %v, want a refusal naming status 78", err)
	}
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "\n"); n != 3 {
		t.Fatalf("%d starts, want 3", n)
	}
	if took := time.Since(start); took < First+2*First {
		t.Fatalf("3 starts in %v: no backoff between them", took)
	}
}

// Stopping sends SIGTERM to the process group, and SIGKILL after the grace period.
func TestRunStops(t *testing.T) {
	for _, c := range []struct {
		script string
		grace  time.Duration
	}{
		{"sleep 60 & wait", 5 * time.Second},                      // the shell and its child both get SIGTERM
		{`trap "" TERM; sleep 60 & wait`, 300 * time.Millisecond}, // ignores it: killed
	} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, "t", func() *exec.Cmd {
				cmd := exec.Command("/bin/sh", "-c", c.script)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				return cmd
			}, c.grace, slog.New(slog.DiscardHandler))
		}()
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%q: %v", c.script, err)
			}
			if took := time.Since(start); took > c.grace+2*time.Second {
				t.Fatalf("%q: stopped after %v", c.script, took)
			}
		case <-time.After(c.grace + 5*time.Second):
			t.Fatalf("%q: not stopped", c.script)
		}
	}
}

// A process that dies while a child of its own keeps its output pipe open is noticed at once and
// restarted: Wait does not wait for the pipe (the tokenizerd supervisor killed outright, its
// workers still writing to the Procfile runner's pipe).
func TestRunNoticesDeathDespiteInheritedPipe(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "starts")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, "t", func() *exec.Cmd {
			// The child keeps the pipe for 6 s; the shell exits at once.
			cmd := exec.Command("/bin/sh", "-c", `echo x >> `+count+`; sleep 6 & exit 1`)
			cmd.Stdout = &strings.Builder{} // not a file: exec copies it through a pipe
			return cmd
		}, time.Second, slog.New(slog.DiscardHandler))
	}()
	time.Sleep(4 * time.Second)
	cancel()
	<-done
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "\n"); n < 2 {
		t.Fatalf("%d starts in 4 s: the exit went unnoticed while a child held the pipe", n)
	}
}
