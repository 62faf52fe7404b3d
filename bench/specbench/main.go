// Command specbench measures speculative decoding without a draft model (schedulerd's
// `--speculative ngram`) against the same engine with `--speculative off` and against llama.cpp's
// plain decode, at batch 1, greedy, on three workloads: code editing (the prompt holds a Go file
// of this repository and asks for it rewritten, so the output may copy the prompt), structured
// output with long property names (a JSON schema through /generate's json_schema, where the
// grammar forces the keys), and free text with few repeats.
//
// Every run is a fresh set of the engine's real processes (schedulerd, detokd, tokenizerd on ZMQ
// sockets) or a fresh llama.cpp process, inside `flock /tmp/perf.lock`, engines alternating within
// each round. The figure is the decode rate as a streaming client sees it: tokens received after
// the first chunk over the time from the first chunk to the last. /generate's stream is used
// rather than `schedulerd generate` because that command has no grammar (the structured workload
// needs one), reports no time, and bypasses the scheduler where speculation lives; the client's
// view includes the pipeline's per-step cost, which plain decode pays per token and speculation
// per forward pass, as a user of the server would see it. llama.cpp (node-llama-cpp, in process,
// no HTTP) is timed the same way on the same prompt ids: first generated token to last.
//
// On a shared machine a few percent of its CPU time taken by other processes slows a run by
// far more (at 2 threads on 2 cores, a step's parallel loops wait for a preempted thread): each
// run reads how much of the machine other work took while it ran (perfhost.Foreign) and is run
// again when that exceeds -max-foreign. The table has the share, and the CPU time the engine's
// own processes spent per token, which such load changes far less than the rate.
//
// Greedy output ids must be identical with and without speculation on every workload; the
// command exits non-zero (after the table) if any pair differs. The acceptance rate (draft tokens
// the target model confirmed over draft tokens verified, from the engine's
// vllm:spec_decode_num_* counters) stands beside every figure: with random weights the rate,
// not the method, decides the ratio.
//
//	go run ./bench/specbench [-rounds 3] [-models pico=models/pico,...] [-workloads code,json,text]
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmserve/llmserve/bench/internal/perfhost"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
	"github.com/llmserve/llmserve/tokenizer"
)

//go:embed llama.mjs
var llamaScript []byte

// options are the command's flags.
type options struct {
	// work is the llama.cpp peer's work directory (peer/, gguf/, models/).
	work string
	// lock is the file every timed run holds with flock.
	lock string
	// bin holds prebuilt tokenizerd, schedulerd and detokd; empty: build them.
	bin string
	// models are name=dir pairs, in table order.
	models [][2]string
	// workloads are the workload names, in table order.
	workloads []string
	// engines are the runs of a round: off, ngram, llama.cpp.
	engines []string
	// rounds, threads, newTokens, maxDraft, codeTokens: see the flags.
	rounds, threads, newTokens, maxDraft, codeTokens int
	// textPenalty is the free-text workload's repetition_penalty.
	textPenalty float64
	// codeFile is the Go file the code-editing prompt holds.
	codeFile string
	// lockRound holds the lock for a whole round of a cell (its engines back to back) instead
	// of for each run.
	lockRound bool
	// quietIdle and quietWait: before each timed run, wait up to quietWait for this idle share.
	quietIdle float64
	quietWait time.Duration
	// maxForeign and retries: a run during which other work took more than maxForeign of the
	// machine's time is run again, up to retries times (the last try is kept).
	maxForeign float64
	retries    int
}

func main() {
	var o options
	var models, workloads, engines string
	flag.StringVar(&o.work, "work", envOr("WORK", "/tmp/llamacpp-peer"), "the llama.cpp peer's work directory (../shared/peers/llamacpp run.sh setup model)")
	flag.StringVar(&o.lock, "lock", envOr("PERF_LOCK", "/tmp/perf.lock"), "lock file every timed run holds (flock)")
	flag.StringVar(&o.bin, "bin", "", "directory with built tokenizerd, schedulerd, detokd (default: build them into a temporary directory)")
	flag.StringVar(&models, "models", "pico=models/pico,qwen3-0.6b=WORK/models/qwen3-0.6b-random", "name=dir of each model (WORK is -work)")
	flag.StringVar(&workloads, "workloads", "code,json,text", "workloads: code (editing a file in the prompt), json (schema with long keys), text (free text)")
	flag.StringVar(&engines, "engines", "off,ngram,llama.cpp", "runs of each round: off, ngram (ours with --speculative off / ngram), llama.cpp")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every engine once per workload and model")
	flag.IntVar(&o.threads, "threads", 2, "threads of both engines (schedulerd's GOMAXPROCS)")
	flag.IntVar(&o.newTokens, "new-tokens", 256, "tokens generated per run (ignore EOS)")
	flag.IntVar(&o.maxDraft, "max-draft", 0, "--speculative-max-draft for ngram runs (0: the engine's default)")
	flag.IntVar(&o.codeTokens, "code-tokens", 1200, "longest code-editing prompt, in tokens (the file is cut at a line to fit)")
	flag.Float64Var(&o.textPenalty, "text-repetition-penalty", 1.3, "repetition_penalty of the free-text workload (greedy output of small or random models loops without one; 1: none)")
	flag.StringVar(&o.codeFile, "code-file", "tokenizer/normalize.go", "Go file the code-editing prompt holds")
	lockScope := flag.String("lock-scope", "run", "what one hold of the lock covers: run, or round (a cell's engines back to back: fewer waits when many share the lock, and the engines of a round see the same machine)")
	flag.Float64Var(&o.quietIdle, "quiet-idle", 0.8, "idle share of the cores to wait for before each timed run")
	flag.DurationVar(&o.quietWait, "quiet-wait", 20*time.Second, "longest wait for -quiet-idle (the run goes ahead after it either way)")
	flag.Float64Var(&o.maxForeign, "max-foreign", 0.02, "run again a run during which other processes (or the hypervisor) took more than this share of the machine's CPU time (1: never)")
	flag.IntVar(&o.retries, "retries", 3, "how many times a run over -max-foreign is run again")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("specbench: ")
	for _, kv := range strings.Split(models, ",") {
		name, dir, ok := strings.Cut(kv, "=")
		if !ok {
			log.Fatalf("-models: %q is not name=dir", kv)
		}
		o.models = append(o.models, [2]string{name, strings.ReplaceAll(dir, "WORK", o.work)})
	}
	o.workloads, o.engines = strings.Split(workloads, ","), strings.Split(engines, ",")
	switch *lockScope {
	case "run":
	case "round":
		o.lockRound = true
	default:
		log.Fatalf("-lock-scope: %q is neither run nor round", *lockScope)
	}
	for _, w := range o.workloads {
		if _, ok := workloadNames[w]; !ok {
			log.Fatalf("-workloads: unknown workload %q", w)
		}
	}
	for _, e := range o.engines {
		if e != "off" && e != "ngram" && e != "llama.cpp" {
			log.Fatalf("-engines: unknown engine %q", e)
		}
	}
	if o.rounds < 1 || o.threads < 1 || o.newTokens < 2 || o.maxDraft < 0 || o.textPenalty <= 0 || o.maxForeign <= 0 || o.retries < 0 {
		log.Fatal("-rounds and -threads must be >= 1, -new-tokens >= 2, -max-draft >= 0, -text-repetition-penalty > 0, -max-foreign > 0, -retries >= 0")
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// result is one timed run.
type result struct {
	model, workload, engine string
	// ids are the generated ids.
	ids []int32
	// tokS is the decode rate: tokens after the first chunk over first chunk to last.
	tokS float64
	// perChunk is the tokens per streamed chunk after the first (ours): at stream interval 1
	// a chunk is one step's tokens unless the stream coalesced steps.
	perChunk float64
	// drafted and accepted are the run's speculative draft tokens verified and accepted (ours).
	drafted, accepted float64
	// haveSpec says the engine exposed the speculative counters.
	haveSpec bool
	// prompt is the prompt's ids.
	prompt []int32
	// idle is the idle share of the cores just before the run.
	idle float64
	// foreign is the share of the machine's CPU time during the run that other processes (or
	// the hypervisor) took (perfhost.Foreign): what slowed the run besides its own work.
	foreign float64
	// cpuMs is the CPU time the engine's processes (all of them, workers included) spent
	// during the timed request (ours; its prefill included) per generated token, in
	// milliseconds: its own work, which other load changes far less than the wall-clock rate.
	cpuMs float64
	// tries is how many times the run was made (more than 1: earlier tries were over
	// -max-foreign).
	tries int
	err   error
}

func run(o options) error {
	if slices.Contains(o.engines, "llama.cpp") {
		for _, p := range []string{"peer/common.mjs", "peer/node_modules/node-llama-cpp"} {
			if _, err := os.Stat(filepath.Join(o.work, p)); err != nil {
				return fmt.Errorf("%s is missing: run ENGINE_SRC=<checkout> ../shared/peers/llamacpp/run.sh setup model first (%v)", filepath.Join(o.work, p), err)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "specbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := o.bin
	if bin == "" {
		bin = filepath.Join(tmp, "bin")
		log.Printf("building tokenizerd, schedulerd, detokd into %s", bin)
		if out, err := exec.Command("go", "build", "-o", bin+"/", "./cmd/tokenizerd", "./cmd/schedulerd", "./cmd/detokd").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	help, _ := exec.Command(filepath.Join(bin, "schedulerd"), "serve", "--help").CombinedOutput()
	hasSpec := bytes.Contains(help, []byte("--speculative"))
	if !hasSpec && slices.Contains(o.engines, "ngram") {
		return fmt.Errorf("%s has no --speculative flag: this build cannot run the ngram engine (use -engines off,llama.cpp)", filepath.Join(bin, "schedulerd"))
	}
	scriptPath := filepath.Join(tmp, "llama.mjs")
	if err := os.WriteFile(scriptPath, llamaScript, 0o644); err != nil {
		return err
	}
	code, err := os.ReadFile(o.codeFile)
	if err != nil {
		return fmt.Errorf("code-editing prompt: %w", err)
	}

	// Prompts (each model's own tokenizer) and the GGUF llama.cpp reads.
	type prepared struct {
		tok     *tokenizer.Tokenizer
		prompts map[string][]int32
		gguf    string
	}
	prep := map[string]prepared{}
	for _, m := range o.models {
		tok, err := tokenizer.Load(m[1])
		if err != nil {
			return fmt.Errorf("model %s: %w", m[0], err)
		}
		p := prepared{tok: tok, prompts: map[string][]int32{}}
		for _, w := range o.workloads {
			p.prompts[w] = promptIDs(tok, w, string(code), o.codeTokens)
			log.Printf("%s %s: prompt of %d tokens", m[0], w, len(p.prompts[w]))
		}
		if slices.Contains(o.engines, "llama.cpp") {
			if p.gguf, err = writeGGUF(o, m[1]); err != nil {
				return fmt.Errorf("model %s: %w", m[0], err)
			}
		}
		prep[m[0]] = p
	}

	e := &runner{o: o, bin: bin, tmp: tmp, script: scriptPath, hasSpec: hasSpec}
	for _, p := range prep {
		for _, ids := range p.prompts {
			e.contextLen = max(e.contextLen, len(ids)+o.newTokens+64)
		}
	}
	total := len(o.models) * len(o.workloads) * o.rounds * len(o.engines)
	n := 0
	start := time.Now()
	var results []result
	// Model by model, workload by workload, so an interrupted run has whole rounds of the first
	// ones; the engines alternate within each round, and their order reverses every other round.
	for _, m := range o.models {
		for _, w := range o.workloads {
			ids := prep[m[0]].prompts[w]
			// llama.cpp generates as many tokens as ours did (a schema may end the output early).
			want := o.newTokens
			for r := 1; r <= o.rounds; r++ {
				engines := slices.Clone(o.engines)
				if r%2 == 0 {
					slices.Reverse(engines)
				}
				round := func() {
					for _, eng := range engines {
						var res result
						for try := 1; ; try++ {
							if eng == "llama.cpp" {
								res = e.llama(prep[m[0]].gguf, ids, want)
							} else {
								res = e.ours(m[1], eng, w, ids)
							}
							res.tries = try
							if res.err != nil || res.foreign <= o.maxForeign || try > o.retries {
								break
							}
							log.Printf("%s %s round %d %s: other work took %.0f%% of the machine during the run (%.1f tok/s): running it again",
								m[0], w, r, eng, 100*res.foreign, res.tokS)
						}
						if eng != "llama.cpp" && res.err == nil {
							want = len(res.ids)
						}
						res.model, res.workload, res.engine, res.prompt, res.idle = m[0], w, eng, ids, e.lastIdle
						results = append(results, res)
						n++
						msg := fmt.Sprintf("[%d/%d %v] %s %s round %d %s: ", n, total, time.Since(start).Round(time.Second), m[0], w, r, eng)
						switch {
						case res.err != nil:
							log.Printf("%s%v", msg, res.err)
						case res.haveSpec && res.drafted > 0:
							log.Printf("%s%.1f tok/s, %d tokens, acceptance %.0f%% (%.0f of %.0f drafted), %.1f CPU ms/token (idle before: %.2f, foreign load: %.2f)", msg, res.tokS, len(res.ids),
								100*res.accepted/res.drafted, res.accepted, res.drafted, res.cpuMs, e.lastIdle, res.foreign)
						case eng != "llama.cpp":
							log.Printf("%s%.1f tok/s, %d tokens, %.2f per chunk, %.1f CPU ms/token (idle before: %.2f, foreign load: %.2f)", msg, res.tokS, len(res.ids), res.perChunk,
								res.cpuMs, e.lastIdle, res.foreign)
						default:
							log.Printf("%s%.1f tok/s, %d tokens (idle before: %.2f, foreign load: %.2f)", msg, res.tokS, len(res.ids), e.lastIdle, res.foreign)
						}
						if r == 1 && res.err == nil {
							log.Printf("%s %s %s output: %q", m[0], w, eng, perfhost.Tail(prep[m[0]].tok.Decode(res.ids, false), 400))
						}
					}
				}
				if o.lockRound {
					if err := e.locked(func() error { e.held = true; round(); e.held = false; return nil }); err != nil {
						return err
					}
				} else {
					round()
				}
			}
			// The table so far, so that an interrupted run has one.
			_ = report(os.Stderr, o, results)
		}
	}
	return report(os.Stdout, o, results)
}

// runner starts the timed runs.
type runner struct {
	o                options
	bin, tmp, script string
	// hasSpec: the schedulerd build has --speculative.
	hasSpec bool
	// contextLen is schedulerd's --context-length: the longest prompt and -new-tokens, and a margin.
	contextLen int
	// lastIdle is the idle share of the cores measured just before the latest run.
	lastIdle float64
	// held: the lock is held already (-lock-scope round).
	held bool
}

// locked runs f holding the perf lock, once the cores are quiet (or -quiet-wait has passed),
// since other work on a shared machine slows either engine's threads.
func (e *runner) locked(f func() error) error {
	if e.held {
		e.lastIdle = perfhost.IdleShare(2 * time.Second)
		return f()
	}
	unlock, err := perfhost.Lock(e.o.lock)
	if err != nil {
		return err
	}
	defer unlock()
	e.lastIdle = perfhost.WaitQuiet(e.o.quietIdle, e.o.quietWait)
	return f()
}

func (e *runner) llama(gguf string, ids []int32, n int) result {
	pj, _ := json.Marshal(map[string]any{"ids": ids, "new_tokens": n})
	pp := filepath.Join(e.tmp, "prompt.json")
	if err := os.WriteFile(pp, pj, 0o644); err != nil {
		return result{err: err}
	}
	var out, errb bytes.Buffer
	var foreign float64
	err := e.locked(func() error {
		cmd := exec.Command("node", e.script, "--peer", filepath.Join(e.o.work, "peer"), "--model", gguf, "--prompt", pp,
			"--threads", strconv.Itoa(e.o.threads))
		cmd.Stdout, cmd.Stderr = &out, &errb
		c0 := perfhost.ReadCPU("")
		err := cmd.Run()
		// The whole process (its model load too): node times its decode inside.
		c1 := perfhost.ReadCPU("")
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			c1.Own = uint64((time.Duration(ru.Utime.Nano()) + time.Duration(ru.Stime.Nano())) * perfhost.TicksPerSecond / time.Second)
		}
		foreign = perfhost.Foreign(c0, c1)
		return err
	})
	if err != nil {
		return result{err: fmt.Errorf("llama.mjs: %v: %s", err, perfhost.Tail(errb.String(), 1500))}
	}
	var r struct {
		IDs  []int32 `json:"ids"`
		TokS float64 `json:"tok_s"`
	}
	if err := json.Unmarshal(perfhost.LastLine(out.Bytes()), &r); err != nil {
		return result{err: fmt.Errorf("llama.mjs printed %q: %w", perfhost.Tail(out.String(), 500), err)}
	}
	return result{ids: r.IDs, tokS: r.TokS, foreign: foreign}
}

// ours starts the engine (mode off or ngram) on a free port, sends one untimed warm-up request
// and the timed one, reads the speculative counters, and stops the engine.
func (e *runner) ours(modelDir, mode, workload string, ids []int32) result {
	var res result
	err := e.locked(func() error {
		eng, err := e.startEngine(modelDir, mode)
		if err != nil {
			return err
		}
		defer eng.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		warm := map[string]any{"input_ids": []int32{1, 2, 3, 4, 5, 6, 7, 8},
			"sampling_params": map[string]any{"max_new_tokens": 4, "temperature": 0, "ignore_eos": true}}
		if _, _, _, err := eng.stream(ctx, warm); err != nil {
			return eng.failed(fmt.Errorf("warm-up request: %w", err))
		}
		d0, a0, _ := eng.specCounters()
		sp := map[string]any{"max_new_tokens": e.o.newTokens, "temperature": 0, "ignore_eos": true, "stream_interval": 1}
		switch workload {
		case "json":
			sp["json_schema"] = surveySchema
		case "text":
			if e.o.textPenalty != 1 {
				sp["repetition_penalty"] = e.o.textPenalty
			}
		}
		// The processes counted are those whose command line names the engine's run
		// directory: schedulerd, detokd, tokenizerd and its workers.
		c0 := perfhost.ReadCPU(eng.logs)
		res.ids, res.tokS, res.perChunk, err = eng.stream(ctx, map[string]any{"input_ids": ids, "sampling_params": sp})
		if err != nil {
			return eng.failed(fmt.Errorf("timed request: %w", err))
		}
		c1 := perfhost.ReadCPU(eng.logs)
		res.foreign = perfhost.Foreign(c0, c1)
		if c1.Own > c0.Own && len(res.ids) > 0 {
			res.cpuMs = 1000 * perfhost.CPUSeconds(c1.Own-c0.Own) / float64(len(res.ids))
		}
		if res.tokS == 0 {
			return fmt.Errorf("timed request: %d ids and nothing to time after the first chunk", len(res.ids))
		}
		// The ranks' counters reach the HTTP workers with their periodic reports.
		time.Sleep(1200 * time.Millisecond)
		d1, a1, ok := eng.specCounters()
		res.drafted, res.accepted, res.haveSpec = d1-d0, a1-a0, ok
		return nil
	})
	if err != nil {
		return result{err: err}
	}
	return res
}

// engine is one running set of the engine's processes.
type engine struct {
	// base is the HTTP API's address.
	base string
	// procs are the processes started, in start order.
	procs []*proc
	// logs is the directory of their logs.
	logs string
}

// proc is one started process.
type proc struct {
	name string
	cmd  *exec.Cmd
	// exited is closed once the process has exited (and been waited for).
	exited chan struct{}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (e *runner) startEngine(modelDir, mode string) (*engine, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	runDir, err := os.MkdirTemp(e.tmp, "run-") // 0700, as the ipc sockets' directory must be
	if err != nil {
		return nil, err
	}
	eng := &engine{base: fmt.Sprintf("http://127.0.0.1:%d", port), logs: runDir}
	common := []string{"--run-dir", runDir, "--port", strconv.Itoa(port), "--model-path", modelDir, "--tokenizer-worker-num", "1"}
	// A context as long as the runs need, so the default KV cache holds it whatever the model's
	// max_position_embeddings.
	sched := append([]string{"serve", "--context-length", strconv.Itoa(e.contextLen)}, common...)
	if e.hasSpec {
		sched = append(sched, "--speculative", mode)
		if mode == "ngram" && e.o.maxDraft > 0 {
			sched = append(sched, "--speculative-max-draft", strconv.Itoa(e.o.maxDraft))
		}
	}
	starts := []struct {
		name string
		env  []string
		args []string
	}{
		{"schedulerd", []string{"GOMAXPROCS=" + strconv.Itoa(e.o.threads), "OPENBLAS_NUM_THREADS=" + strconv.Itoa(e.o.threads)}, sched},
		{"detokd", nil, common},
		// A rank that misses its heartbeats for 1 s (the default) is marked down; on a loaded
		// 2-core host the first forward pass of a fresh process (weights paged in) can take
		// longer, which would fail the run without saying anything about speed.
		{"tokenizerd", nil, append([]string{"serve"}, append(common, "--stream-interval", "1", "--rank-timeout", "30s")...)},
	}
	for _, s := range starts {
		lf, err := os.Create(filepath.Join(runDir, s.name+".log"))
		if err != nil {
			eng.stop()
			return nil, err
		}
		cmd := exec.Command(filepath.Join(e.bin, s.name), s.args...)
		cmd.Env = append(os.Environ(), s.env...)
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			lf.Close()
			eng.stop()
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		lf.Close()
		p := &proc{name: s.name, cmd: cmd, exited: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(p.exited) }()
		eng.procs = append(eng.procs, p)
	}
	// Ready once /health (a rank has reported) answers several times in a row.
	deadline := time.Now().Add(3 * time.Minute)
	for ok := 0; ok < 5; {
		if time.Now().After(deadline) {
			eng.stop()
			return nil, eng.failed(errors.New("the engine did not become healthy in 3 minutes"))
		}
		for _, p := range eng.procs {
			select {
			case <-p.exited:
				eng.stop()
				return nil, eng.failed(fmt.Errorf("%s exited while starting: %v", p.name, p.cmd.ProcessState))
			default:
			}
		}
		if r, err := http.Get(eng.base + "/health"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				ok++
			} else {
				ok = 0
			}
		} else {
			ok = 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	return eng, nil
}

// stop ends the processes this engine started (SIGTERM, then SIGKILL after 10 s), newest first.
func (eng *engine) stop() {
	for i := len(eng.procs) - 1; i >= 0; i-- {
		p := eng.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	eng.procs = nil
}

// failed adds the tail of the processes' logs to err.
func (eng *engine) failed(err error) error {
	var b strings.Builder
	for _, name := range []string{"schedulerd", "detokd", "tokenizerd"} {
		data, _ := os.ReadFile(filepath.Join(eng.logs, name+".log"))
		fmt.Fprintf(&b, "\n---- %s ----\n%s", name, perfhost.Tail(string(data), 1200))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// stream posts body to /generate with stream on and returns the generated ids, the decode
// rate (the ids of every chunk after the first, over the time from the first chunk to the last)
// and the ids per chunk after the first; the rates are 0 when one chunk held every id.
func (eng *engine) stream(ctx context.Context, body map[string]any) (ids []int32, tokS, perChunk float64, err error) {
	body["stream"] = true
	bj, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, eng.base+"/generate", bytes.NewReader(bj))
	if err != nil {
		return nil, 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := bufio.NewReader(resp.Body).Peek(2000)
		return nil, 0, 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var first, last time.Time
	firstN, chunks := 0, 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		now := time.Now()
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			break
		}
		var ch struct {
			OutputIDs []int32         `json:"output_ids"`
			Error     json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return nil, 0, 0, fmt.Errorf("chunk %q: %w", data, err)
		}
		if ch.Error != nil {
			return nil, 0, 0, fmt.Errorf("error event: %s", ch.Error)
		}
		if len(ch.OutputIDs) == 0 {
			continue
		}
		if len(ids) == 0 {
			first, firstN = now, len(ch.OutputIDs)
		}
		last = now
		ids = append(ids, ch.OutputIDs...)
		chunks++
	}
	if err := sc.Err(); err != nil {
		return nil, 0, 0, err
	}
	if len(ids)-firstN < 1 || !last.After(first) {
		return ids, 0, 0, nil // nothing to time after the first chunk (a short request)
	}
	n := float64(len(ids) - firstN)
	return ids, n / last.Sub(first).Seconds(), n / float64(chunks-1), nil
}

// specCounters reads the engine's speculative counters (vLLM's names); ok is false when the
// engine exposes none.
func (eng *engine) specCounters() (drafted, accepted float64, ok bool) {
	r, err := http.Get(eng.base + "/metrics")
	if err != nil {
		return 0, 0, false
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		for name, dst := range map[string]*float64{
			"vllm:spec_decode_num_draft_tokens_total":    &drafted,
			"vllm:spec_decode_num_accepted_tokens_total": &accepted,
		} {
			rest, found := strings.CutPrefix(line, name)
			if !found || rest == "" || rest[0] != '{' && rest[0] != ' ' {
				continue
			}
			fs := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if len(fs) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fs[0], 64); err == nil {
				*dst += v
				ok = true
			}
		}
	}
	return drafted, accepted, ok
}

// writeGGUF writes the checkpoint at dir as a BF16 GGUF with the project's writer (the file
// cpumodel writes for the same checkpoint), unless it exists.
func writeGGUF(o options, dir string) (string, error) {
	path := filepath.Join(o.work, "gguf", "llmserve-"+filepath.Base(dir)+"-"+quant.BF16.String()+".gguf")
	if _, err := os.Stat(path); err == nil {
		log.Printf("using %s", path)
		return path, nil
	}
	start := time.Now()
	log.Printf("writing %s from %s", path, dir)
	m, err := model.Load(dir)
	if err != nil {
		return "", err
	}
	if m.Layers[0].QKV.Type != quant.BF16 {
		if err := model.Quantize(m, quant.BF16); err != nil {
			return "", err
		}
	}
	w, err := m.GGUFWriter()
	if err != nil {
		return "", err
	}
	if err := tokenizer.SetGGUFMetadata(w, dir, m.Config.VocabSize); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := w.WriteFile(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	log.Printf("wrote %s in %v", path, time.Since(start).Round(time.Second))
	return path, nil
}
