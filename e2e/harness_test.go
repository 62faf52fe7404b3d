// Package e2e starts the real engine binaries on real ZMQ sockets with the committed pico model
// and talks to them over HTTP, as users and operators do.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llmserve-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/tokenizerd", "./cmd/schedulerd", "./cmd/detokd", "./cmd/procfile")
	build.Dir = ".."
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// modelPath is the committed default model.
var modelPath, _ = filepath.Abs("../models/pico")

type engineOpts struct {
	workers       int
	dpSize        int
	skipDetok     bool
	skipTokInit   bool
	schedArgs     []string
	tokArgs       []string
	lbMethod      string
	rankTimeout   time.Duration
	noWaitHealthy bool
	model         string // model directory; "" is the committed pico
	modelArg      bool   // give the model as each command's argument (serve MODEL), not --model-path
}

type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	log  *syncBuffer
}

// engine is one running engine: its processes, run directory and HTTP address.
type engine struct {
	t      *testing.T
	opts   engineOpts
	runDir string
	port   int
	base   string
	mu     sync.Mutex
	procs  map[string]*proc
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startEngine starts schedulerd (one per rank), detokd (default mode) and tokenizerd, and waits
// until /health says every rank answers.
func startEngine(t *testing.T, o engineOpts) *engine {
	t.Helper()
	if o.workers == 0 {
		o.workers = 1
	}
	if o.dpSize == 0 {
		o.dpSize = 1
	}
	runDir, err := os.MkdirTemp("", "llmse2e-")
	if err != nil {
		t.Fatal(err)
	}
	e := &engine{t: t, opts: o, runDir: runDir, port: freePort(t), procs: map[string]*proc{}}
	e.base = "http://127.0.0.1:" + strconv.Itoa(e.port)
	t.Cleanup(func() {
		e.stopAll()
		if t.Failed() {
			for name, p := range e.procs {
				t.Logf("---- %s log ----\n%s", name, tail(p.log.String(), 4000))
			}
		}
		os.RemoveAll(runDir)
	})
	for r := 0; r < o.dpSize; r++ {
		e.start(fmt.Sprintf("schedulerd%d", r), "schedulerd", "serve", append([]string{"--dp-rank", strconv.Itoa(r)}, o.schedArgs...)...)
	}
	if !o.skipDetok && !o.skipTokInit {
		e.start("detokd", "detokd", "")
	}
	var args []string
	if o.lbMethod != "" {
		args = append(args, "--load-balance-method", o.lbMethod)
	}
	// Tests of rank death set their own timeout; the others get 3 s, not the engine's 1 s, so a
	// rank starved of CPU by the suite's other packages on a 2-core CI machine is not marked down.
	rankTimeout := 3 * time.Second
	if o.rankTimeout > 0 {
		rankTimeout = o.rankTimeout
	}
	args = append(args, "--rank-timeout", rankTimeout.String())
	e.start("tokenizerd", "tokenizerd", "serve", append(args, o.tokArgs...)...)
	if !o.noWaitHealthy {
		e.waitHealthy(60 * time.Second)
	}
	return e
}

// commonArgs are the flags every process shares.
func (e *engine) commonArgs() []string {
	model := modelPath
	if e.opts.model != "" {
		model = e.opts.model
	}
	a := []string{"--model-path", model}
	if e.opts.modelArg {
		a = []string{model}
	}
	a = append(a, "--run-dir", e.runDir, "--port", strconv.Itoa(e.port),
		"--tokenizer-worker-num", strconv.Itoa(e.opts.workers), "--dp-size", strconv.Itoa(e.opts.dpSize), "--log-level", "debug")
	if e.opts.skipDetok {
		a = append(a, "--skip-detokenization")
	}
	if e.opts.skipTokInit {
		a = append(a, "--skip-tokenizer-init")
	}
	return a
}

func (e *engine) start(name, bin, sub string, extra ...string) {
	e.t.Helper()
	var full []string
	if sub != "" {
		full = append(full, sub)
	}
	full = append(append(full, e.commonArgs()...), extra...)
	p := &proc{name: name, args: full, log: &syncBuffer{}}
	e.mu.Lock()
	e.procs[name] = p
	e.mu.Unlock()
	e.launch(p, bin)
}

func (e *engine) launch(p *proc, bin string) {
	e.t.Helper()
	p.cmd = exec.Command(filepath.Join(binDir, bin), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // none outlives a test binary that panics or times out
	if err := p.cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", p.name, err)
	}
}

// kill stops one process (its whole process group) with SIGKILL, as a crash would.
func (e *engine) kill(name string) {
	e.mu.Lock()
	p := e.procs[name]
	e.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// restart starts a killed process again with the same arguments.
func (e *engine) restart(name string) {
	e.mu.Lock()
	p := e.procs[name]
	e.mu.Unlock()
	e.launch(p, strings.TrimRight(name, "0123456789"))
}

func (e *engine) stopAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.procs {
		if p.cmd.ProcessState != nil {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range e.procs {
		if p.cmd.ProcessState != nil {
			continue
		}
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

func (e *engine) waitHealthy(timeout time.Duration) {
	e.t.Helper()
	// Fresh connections, so SO_REUSEPORT spreads the probes over the tokenizer workers; each
	// worker is healthy once it has heard from every rank, so ask until several in a row agree.
	client := freshClient
	deadline := time.Now().Add(timeout)
	inRow := 0
	for time.Now().Before(deadline) {
		resp, err := client.Get(e.base + "/health")
		ok := err == nil && resp.StatusCode == 200
		if err == nil {
			resp.Body.Close()
		}
		if !ok {
			inRow = 0
		} else if inRow++; inRow >= 4*e.opts.workers {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	e.t.Fatalf("engine not healthy after %v", timeout)
}

// compileSchema compiles a JSON schema for the independent validator the tests check outputs
// with.
func compileSchema(t *testing.T, text string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runNodeClient runs e2e/node/script (an official JavaScript client) against a fresh one-worker
// engine serving pico and returns what it printed on stdout; the test is skipped where node is
// not installed.
func runNodeClient(t *testing.T, script string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	e := startEngine(t, engineOpts{workers: 1})
	cmd := exec.Command(node, script, e.base+"/v1", "pico")
	cmd.Dir = "node"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s%s", script, err, out, stderr.Bytes())
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// post sends a JSON body and returns the status and body.
func (e *engine) post(path string, body any) (int, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(e.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *engine) postRaw(path, body string) (int, []byte) {
	e.t.Helper()
	resp, err := http.Post(e.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (e *engine) getJSON(path string, v any) int {
	e.t.Helper()
	resp, err := http.Get(e.base + path)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if v != nil {
		_ = json.NewDecoder(resp.Body).Decode(v)
	}
	return resp.StatusCode
}

// sseEvents posts body and returns the data payloads of the SSE stream, [DONE] included.
func (e *engine) sseEvents(ctx context.Context, path string, body any) ([]string, error) {
	var events []string
	err := e.streamEvents(ctx, path, body, func(data []byte) error {
		events = append(events, string(data))
		return nil
	})
	return events, err
}

// streamEvents posts body to path and calls each with every data payload ([DONE] included) as
// it arrives, on a connection of its own.
func (e *engine) streamEvents(ctx context.Context, path string, body any, each func(data []byte) error) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", e.base+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, msg)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			if err := each(data); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// outputModes are the output paths a constrained-decoding test runs in: detokd or the workers
// detokenizing, with one and with three tokenizer workers.
var outputModes = []struct {
	name      string
	workers   int
	skipDetok bool
}{{"detokd-1worker", 1, false}, {"detokd-3workers", 3, false}, {"skipdetok-1worker", 1, true}, {"skipdetok-3workers", 3, true}}

// concurrently runs check(i) for every i < n at once and reports each error it returns.
func concurrently(t *testing.T, n int, check func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := check(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
