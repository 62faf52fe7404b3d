package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/tokenizer"
)

// The XGrammar peer is its WebAssembly build from npm, installed and loaded
// the way ../shared/peers/xgrammar/run.sh does it (npm install, then the UMD
// bundle loaded as CommonJS), driven by xgrammar_driver.cjs over the same
// token ids this process feeds package grammar.

const xgrammarPkg = "@mlc-ai/web-xgrammar@0.1.27"

//go:embed xgrammar_driver.cjs
var xgrammarDriver []byte

// installPeer installs the npm package into dir once and writes the driver.
func installPeer(dir string) (bundle, driver string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("peer dir: %w", err)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "", fmt.Errorf("the XGrammar peer needs %s on PATH: %w", tool, err)
		}
	}
	bundle = filepath.Join(dir, "xgr.cjs")
	stamp := filepath.Join(dir, "installed-"+strings.NewReplacer("@", "", "/", "_").Replace(xgrammarPkg))
	if _, err := os.Stat(stamp); err != nil {
		run := func(args ...string) error {
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
			if err := run("npm", "init", "-y"); err != nil {
				return "", "", err
			}
		}
		fmt.Fprintf(os.Stderr, "installing %s into %s\n", xgrammarPkg, dir)
		if err := run("npm", "install", "--silent", xgrammarPkg); err != nil {
			return "", "", err
		}
		src, err := os.ReadFile(filepath.Join(dir, "node_modules/@mlc-ai/web-xgrammar/lib/index.js"))
		if err != nil {
			return "", "", fmt.Errorf("XGrammar bundle: %w", err)
		}
		if err := os.WriteFile(bundle, src, 0o644); err != nil {
			return "", "", err
		}
		if err := os.WriteFile(stamp, nil, 0o644); err != nil {
			return "", "", err
		}
	}
	driver = filepath.Join(dir, "driver.cjs")
	if err := os.WriteFile(driver, xgrammarDriver, 0o644); err != nil {
		return "", "", err
	}
	return bundle, driver, nil
}

// peerProc is one running node driver.
type peerProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startPeer(bundle, driver, tokJSON string, eos []int32, logf *os.File) (*peerProc, error) {
	var ids []string
	for _, e := range eos {
		ids = append(ids, fmt.Sprint(e))
	}
	cmd := exec.Command("node", driver, bundle, tokJSON, strings.Join(ids, ","))
	cmd.Stderr = logf
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	p := &peerProc{cmd: cmd, in: in, lines: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			// XGrammar's wasm prints warnings on stdout; replies are JSON objects.
			if l := sc.Text(); strings.HasPrefix(l, "{") {
				p.lines <- l
			} else {
				fmt.Fprintln(logf, "stdout:", l)
			}
		}
		close(p.lines)
	}()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.Contains(l, `"ready":true`) {
			p.stop()
			return nil, fmt.Errorf("XGrammar driver did not start (see %s): %q", logf.Name(), l)
		}
	case <-time.After(5 * time.Minute):
		p.stop()
		return nil, fmt.Errorf("XGrammar driver did not start in 5 minutes")
	}
	return p, nil
}

func (p *peerProc) stop() {
	p.in.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	for range p.lines {
	}
}

type peerJob struct {
	Schema string    `json:"schema"`
	Tests  []peerDoc `json:"tests"`
}

type peerDoc struct {
	Valid bool    `json:"valid"`
	IDs   []int32 `json:"ids"`
}

type peerReply struct {
	CompileErr string    `json:"compile_err"`
	Crash      string    `json:"crash"`
	TTFM       float64   `json:"ttfm_us"`
	TBM        []float64 `json:"tbm_us"`
	ValidErr   int       `json:"valid_err"`
	InvalidErr int       `json:"invalid_err"`
}

// runPeer runs XGrammar over files with the same documents and token ids as
// the grammar run. A schema that takes longer than timeout (or kills the
// driver) is a timeout (or crash) and the driver is restarted.
func runPeer(dir, tokDir string, tok *tokenizer.Tokenizer, eos []int32, files []string, timeout time.Duration, verbose bool) (*stats, error) {
	bundle, driver, err := installPeer(dir)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "driver-stderr.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	tokJSON, err := filepath.Abs(filepath.Join(tokDir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	st := newStats("XGrammar 0.1.27 (WASM)")
	var p *peerProc
	defer func() {
		if p != nil {
			p.stop()
		}
	}()
	start := time.Now()
	lastProgress := start
	fmt.Fprintf(os.Stderr, "XGrammar peer: %d schemas (driver log %s)\n", len(files), logf.Name())
	for i, f := range files {
		if p == nil {
			if p, err = startPeer(bundle, driver, tokJSON, eos, logf); err != nil {
				return nil, err
			}
		}
		sf, err := loadSchema(f)
		if err != nil {
			return nil, err
		}
		job := peerJob{Schema: string(sf.Schema), Tests: []peerDoc{}}
		for _, tc := range sf.Tests {
			doc, err := grammar.CompactJSON(tc.Data)
			if err != nil {
				continue
			}
			job.Tests = append(job.Tests, peerDoc{Valid: tc.Valid, IDs: tok.Encode(doc, false)})
		}
		line, err := json.Marshal(job)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(f)
		var r result
		if _, err := p.in.Write(append(line, '\n')); err != nil {
			r.crash = "driver exited: " + err.Error()
		} else {
			select {
			case l, ok := <-p.lines:
				if !ok {
					r.crash = "driver exited (see " + logf.Name() + ")"
					break
				}
				var rep peerReply
				if err := json.Unmarshal([]byte(l), &rep); err != nil {
					return nil, fmt.Errorf("XGrammar driver reply for %s: %w", name, err)
				}
				r = result{compileErr: rep.CompileErr, crash: rep.Crash, ttfm: rep.TTFM, tbm: rep.TBM,
					validErr: rep.ValidErr, invalidErr: rep.InvalidErr}
			case <-time.After(timeout):
				r.timeout = true
			}
		}
		if r.timeout || strings.HasPrefix(r.crash, "driver exited") {
			p.stop()
			p = nil
		}
		st.add(r)
		r.report(os.Stderr, "xgrammar", name, verbose, verbose)
		if i+1 == len(files) || time.Since(lastProgress) > 10*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(os.Stderr, "xgrammar [%d/%d] %s (%.0fs)\n", i+1, len(files), st.progress(), time.Since(start).Seconds())
		}
	}
	return st, nil
}
