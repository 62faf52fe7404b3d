// Command procfile runs the processes of a Procfile (`name: command` lines, run by /bin/sh) as
// one engine: each is restarted with backoff when it exits, a process that refuses to start
// (exit status 78: another engine holds its port or run directory) stops them all, and SIGINT or
// SIGTERM stops them in the reverse of their order (tokenizerd, listed last, drains first while
// the ranks still serve it); a runner killed outright (SIGKILL) takes them with it, each getting
// SIGTERM from the kernel. Their output is interleaved line by line, prefixed with the name.
// Unlike goreman it has no control port: nothing listens.
//
//	procfile [-grace 40s] PROCFILE
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/cmd/internal/supervise"
)

// entry is one Procfile line.
type entry struct {
	name, command string
}

func main() {
	grace := flag.Duration("grace", 40*time.Second, "how long a process may take to stop after SIGTERM before it is killed")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: procfile [-grace D] PROCFILE")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("proc", "procfile")
	if err := run(flag.Arg(0), *grace, log); err != nil {
		fmt.Fprintln(os.Stderr, "procfile:", err)
		os.Exit(1)
	}
}

// parse reads a Procfile: `name: command` lines; blank lines and # comments are skipped.
func parse(r io.Reader) ([]entry, error) {
	var out []entry
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, command, ok := strings.Cut(line, ":")
		name, command = strings.TrimSpace(name), strings.TrimSpace(command)
		if !ok || name == "" || command == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d: want `name: command`, got %q", n, line)
		}
		if seen[name] {
			return nil, fmt.Errorf("line %d: %s defined twice", n, name)
		}
		seen[name] = true
		out = append(out, entry{name, command})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no processes")
	}
	return out, nil
}

func run(path string, grace time.Duration, log *slog.Logger) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	entries, err := parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	width := 0
	for _, e := range entries {
		width = max(width, len(e.name))
	}
	var outMu sync.Mutex // one line at a time on stdout
	failed := make(chan error, len(entries))
	cancels := make([]context.CancelFunc, len(entries))
	dones := make([]chan struct{}, len(entries))
	for i, e := range entries {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i], dones[i] = cancel, make(chan struct{})
		prefix := fmt.Sprintf("%-*s | ", width, e.name)
		go func() {
			defer close(dones[i])
			err := supervise.Run(ctx, e.name, func() *exec.Cmd {
				c := exec.Command("/bin/sh", "-c", e.command)
				c.SysProcAttr = processAttr()
				c.Stdout = &lineWriter{prefix: prefix, mu: &outMu, w: os.Stdout}
				c.Stderr = c.Stdout
				return c
			}, grace, log)
			if err != nil {
				failed <- err
			}
		}()
	}
	log.Info("running", "procfile", path, "processes", len(entries))
	var result error
	select {
	case sig := <-sigs:
		log.Info("stopping", "signal", sig)
	case result = <-failed:
		log.Error("stopping", "err", result)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		cancels[i]()
		<-dones[i]
	}
	return result
}

// lineWriter prefixes every line written through it and writes whole lines only.
type lineWriter struct {
	prefix string
	mu     *sync.Mutex // shared by every process's writers: guards w
	w      io.Writer
	buf    []byte // a partial line, waiting for its end
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		l.mu.Lock()
		_, _ = io.WriteString(l.w, l.prefix+string(l.buf[:i+1]))
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}
