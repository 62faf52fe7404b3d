// Package perfhost is what the benchmark commands share to time runs on a shared machine: the
// perf lock every timed run holds, a wait for the cores to be quiet, and the helpers that read a
// child process's output.
package perfhost

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Lock takes the exclusive flock on path (created if missing) and returns its release.
func Lock(path string) (unlock func(), err error) {
	lf, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		lf.Close()
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)
		lf.Close()
	}, nil
}

// WaitQuiet waits until the cores are at least minIdle idle over a 2 s window, or maxWait has
// passed, and returns the last idle share seen.
func WaitQuiet(minIdle float64, maxWait time.Duration) float64 {
	deadline := time.Now().Add(maxWait)
	for {
		idle := IdleShare(2 * time.Second)
		if idle >= minIdle || time.Now().After(deadline) {
			return idle
		}
	}
}

// IdleShare is the fraction of all cores' time spent idle over d (from /proc/stat).
func IdleShare(d time.Duration) float64 {
	read := func() (idle, total uint64) {
		data, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		fs := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		for i, f := range fs[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total
	}
	i0, t0 := read()
	time.Sleep(d)
	i1, t1 := read()
	if t1 <= t0 {
		return 0
	}
	return float64(i1-i0) / float64(t1-t0)
}

// LastLine is the last non-empty line of a command's output (where it prints its JSON result).
func LastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return lines[len(lines)-1]
}

// Tail is the last n bytes of s, marked as cut when longer.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
