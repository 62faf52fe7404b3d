// Command procfile runs the processes of a Procfile (`name: command` lines, run by /bin/sh) as
// one engine: each is restarted with backoff when it exits, a process that refuses to start
// (exit status 78: another engine holds its port or run directory) stops them all, and SIGINT or
// SIGTERM stops them in the reverse of their order (tokenizerd, listed last, drains first while
// the ranks still serve it); a runner killed outright (SIGKILL) takes them with it, each getting
// SIGTERM from the kernel. Their output is interleaved line by line, prefixed with the name; with
// -log-format json (or LOG_FORMAT=json) the output is JSON lines only: a process's JSON lines as
// they are, its other lines and the runner's own as JSON objects with the process name in
// "proc". A process that refused to start stops the runner with exit status 78 and its last lines
// (the reason) repeated. Unlike goreman it has no control port: nothing listens.
//
//	procfile [-grace 40s] [-log-format text|json] PROCFILE
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
	format := flag.String("log-format", cmp.Or(os.Getenv("LOG_FORMAT"), "text"), "text (name-prefixed lines) or json (JSON lines only) [$LOG_FORMAT]")
	flag.Parse()
	if flag.NArg() != 1 || (*format != "text" && *format != "json") {
		fmt.Fprintln(os.Stderr, "usage: procfile [-grace D] [-log-format text|json] PROCFILE")
		os.Exit(2)
	}
	jsonLines = *format == "json"
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if jsonLines {
		h = slog.NewJSONHandler(os.Stdout, nil) // one stream of JSON lines with the processes'
	}
	log := slog.New(h).With("proc", "procfile")
	if err := run(flag.Arg(0), *grace, log); err != nil {
		var refused *supervise.RefusedError
		if errors.As(err, &refused) {
			// A configuration error: the caller (make run, systemd) must not retry either.
			os.Exit(supervise.ExitNoRestart)
		}
		log.Error("stopped", "err", err)
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
	writers := make([]*lineWriter, len(entries))
	failed := make(chan error, len(entries))
	cancels := make([]context.CancelFunc, len(entries))
	dones := make([]chan struct{}, len(entries))
	for i, e := range entries {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i], dones[i] = cancel, make(chan struct{})
		writers[i] = &lineWriter{name: e.name, prefix: fmt.Sprintf("%-*s | ", width, e.name), mu: &outMu, w: os.Stdout}
		go func() {
			defer close(dones[i])
			err := supervise.Run(ctx, e.name, func() *exec.Cmd {
				c := exec.Command("/bin/sh", "-c", e.command)
				c.SysProcAttr = processAttr()
				c.Stdout = writers[i]
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
		var refused *supervise.RefusedError
		if errors.As(result, &refused) {
			for i, e := range entries {
				if e.name == refused.Name {
					log.Error("stopping: a process refused to start; fix its configuration",
						"process", e.name, "exit_status", supervise.ExitNoRestart, "reason", writers[i].lastLines())
				}
			}
		} else {
			log.Error("stopping", "err", result)
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		cancels[i]()
		<-dones[i]
	}
	return result
}

// jsonLines is -log-format json: the runner's output is JSON lines only.
var jsonLines bool

// keepLines is how many of a process's last lines the runner repeats when it refuses to start:
// the engine's binaries print their error last.
const keepLines = 1

// lineWriter prefixes every line written through it (in JSON mode: passes JSON lines as they are
// and wraps others as JSON) and writes whole lines only.
type lineWriter struct {
	name   string
	prefix string
	mu     *sync.Mutex // shared by every process's writers: guards w and last
	w      io.Writer
	buf    []byte   // a partial line, waiting for its end
	last   []string // the last keepLines lines, oldest first
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := string(l.buf[:i])
		l.mu.Lock()
		_, _ = io.WriteString(l.w, l.format(line))
		l.last = append(l.last, line)
		if len(l.last) > keepLines {
			l.last = l.last[1:]
		}
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
	return len(p), nil
}

// format is one output line for line, newline included.
func (l *lineWriter) format(line string) string {
	if !jsonLines {
		return l.prefix + line + "\n"
	}
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
		return t + "\n" // the engine's JSON lines name their process already
	}
	b, _ := json.Marshal(struct {
		Time  string `json:"time"`
		Level string `json:"level"`
		Msg   string `json:"msg"`
		Proc  string `json:"proc"`
	}{time.Now().Format(time.RFC3339Nano), "INFO", line, l.name})
	return string(b) + "\n"
}

// lastLines is the process's last lines, joined.
func (l *lineWriter) lastLines() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.last, "\n")
}
