// Package supervise keeps a child process running: it restarts it with backoff when it exits,
// gives up on one that refuses to start for a reason a restart cannot fix (exit status 78, as
// systemd's RestartPreventExitStatus), and stops it with SIGTERM, then SIGKILL after a grace
// period, when told to. The tokenizerd supervisor runs its workers with it, and cmd/procfile
// every process of `make run`.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"syscall"
	"time"
)

// Backoff bounds: a process that exits is restarted after First, doubling up to Max; one that
// ran at least Stable before exiting is restarted after First again.
const (
	First  = 100 * time.Millisecond
	Max    = 5 * time.Second
	Stable = 10 * time.Second
)

// ExitNoRestart is the exit status that means "do not restart me" (EX_CONFIG).
const ExitNoRestart = 78

// RefusedError says that a process refused to start (exit status ExitNoRestart): its own
// output says why.
type RefusedError struct {
	// Name is the process's name.
	Name string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s refused to start (exit status %d: a configuration error); not restarting it", e.Name, ExitNoRestart)
}

// Run keeps the process that start makes running until ctx ends; start is called for every
// (re)start and must return a fresh, unstarted command. When ctx ends the process gets SIGTERM
// (its whole process group when it leads one) and grace to exit before SIGKILL; Run returns nil
// once it has exited. It returns an error when the process cannot be started, or exits with
// ExitNoRestart.
func Run(ctx context.Context, name string, start func() *exec.Cmd, grace time.Duration, log *slog.Logger) error {
	backoff := First
	for ctx.Err() == nil {
		c := start()
		if c.WaitDelay == 0 {
			// Its output may be a pipe that its own children inherited: without a bound, Wait
			// would wait for them too, and a process killed outright would go unnoticed.
			c.WaitDelay = time.Second
		}
		started := time.Now()
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-ctx.Done():
			stop(c, done, grace, name, log)
			return nil
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == ExitNoRestart {
				return &RefusedError{Name: name}
			}
			if time.Since(started) >= Stable {
				backoff = First
			}
			log.Error("process exited; restarting it", "process", name, "err", err, "after", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, Max)
	}
	return nil
}

// stop sends SIGTERM, waits up to grace, then sends SIGKILL.
func stop(c *exec.Cmd, done <-chan error, grace time.Duration, name string, log *slog.Logger) {
	pid := c.Process.Pid
	if c.SysProcAttr != nil && c.SysProcAttr.Setpgid {
		pid = -pid // the whole group: a shell and what it started
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		log.Warn("process did not stop in time; killing it", "process", name, "grace", grace)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
	}
}
