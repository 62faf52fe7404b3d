package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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

// A new user's habits and mistakes on real processes: a configuration error stops `make run`
// once with exit status 78 and the reason, the model given as an argument (or MODEL=) is the one
// served, the KV cache bounds max_model_len and a request that cannot fit is a 400, and
// LOG_FORMAT=json makes `make run`'s output pure JSON lines.

// runEnv is the environment of scripts/run.sh for a test engine, with extra settings (a
// "NAME=" entry removes NAME).
func runEnv(port int, runDir string, extra ...string) []string {
	env := append(os.Environ(), "LLMSERVE_BIN="+binDir, "MODEL_PATH="+modelPath, "PORT="+strconv.Itoa(port),
		"LLMSERVE_RUN_DIR="+runDir, "OPENBLAS_NUM_THREADS=1", "SHUTDOWN_TIMEOUT=2s")
	for _, kv := range extra {
		name, val, _ := strings.Cut(kv, "=")
		kept := env[:0]
		for _, e := range env {
			if !strings.HasPrefix(e, name+"=") {
				kept = append(kept, e)
			}
		}
		env = kept
		if val != "" {
			env = append(env, kv)
		}
	}
	return env
}

// A configuration mistake makes `make run` exit 78 once, saying which process refused and why,
// instead of restarting it forever.
func TestConfigErrorStopsMakeRun(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		want []string // in the output
	}{
		{"model path", []string{"MODEL_PATH=/nonexistent"}, []string{"/nonexistent"}},
		{"device", []string{"DEVICE=npu:0"}, []string{`backend "npu" is not built into this binary`}},
		// make run passes DEVICE through; without a GPU (or its kernels) the CUDA backend refuses
		// with its reason, naming the device
		{"cuda device", []string{"DEVICE=cuda"}, []string{"cuda:0 backend: "}},
		{"second cuda device", []string{"DEVICE=cuda:1"}, []string{"cuda:1 backend: "}},
		{"quantization", []string{"QUANTIZATION=q9_9"}, []string{"--quantization"}},
		{"flag value", []string{"HEARTBEAT=often"}, []string{"HEARTBEAT"}},
		{"context beyond the KV cache", []string{"KV_CACHE_MB=1"}, []string{"4096", "--kv-cache-mb"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runDir := t.TempDir()
			cmd := exec.Command("../scripts/run.sh")
			cmd.Env = runEnv(freePort(t), runDir, c.env...)
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				t.Fatalf("make run still running after 60 s:\n%s", tail(out.String(), 4000))
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 78 {
				t.Fatalf("make run ended with %v, want exit status 78:\n%s", err, tail(out.String(), 4000))
			}
			s := out.String()
			for _, w := range append([]string{"refused to start"}, c.want...) {
				if !strings.Contains(s, w) {
					t.Errorf("output lacks %q:\n%s", w, tail(s, 4000))
				}
			}
			// Restarts before the runner stops the engine (once it does, a worker that its
			// supervisor sees killed by the same SIGTERM may log one before it stops too).
			before, _, _ := strings.Cut(s, "stopping: a process refused to start")
			if n := strings.Count(before, "restarting it"); n > 0 {
				t.Errorf("a process was restarted %d times:\n%s", n, tail(s, 4000))
			}
		})
	}
}

// Stray arguments are refused with exit status 78, in every binary.
func TestStrayArgumentsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"tokenizerd", "serve", modelPath, "extra"},
		{"schedulerd", "serve", modelPath, "extra"},
		{"detokd", modelPath, "extra"},
		{"schedulerd", "generate", "stray", "--input-ids", "1"},
		{"tokenizerd", "serve", "--model", modelPath, "/elsewhere"},
	} {
		// Before the fix these started serving with the argument ignored: bound the wait.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, args[0]), args[1:]...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 78 || !strings.Contains(string(out), "argument") {
			t.Errorf("%v: %v, want exit status 78 naming the argument:\n%s", args, err, out)
		}
	}
}

// myModel is the committed pico under another directory name, which is the id the API serves.
func myModel(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "my-model")
	if err := os.Symlink(modelPath, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// servedID is the model id of /v1/models.
func servedID(t *testing.T, base string) (string, int) {
	t.Helper()
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	resp, err := freshClient.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %+v %v", models, err)
	}
	return models.Data[0].ID, models.Data[0].MaxModelLen
}

// `serve MODEL` serves MODEL (it was ignored, and pico served).
func TestServeModelArgument(t *testing.T) {
	e := startEngine(t, engineOpts{model: myModel(t), modelArg: true})
	if id, _ := servedID(t, e.base); id != "my-model" {
		t.Fatalf("serving %q, want my-model", id)
	}
}

// The KV cache bounds max_model_len, and a request longer than it holds is a 400 naming the
// limit and the setting (it was a 500 from the rank).
func TestKVCacheBoundsRequests(t *testing.T) {
	// pico's KV takes 3 KiB a position: 1 MiB holds 336 positions (21 blocks of 16).
	e := startEngine(t, engineOpts{schedArgs: []string{"--kv-cache-mb", "1", "--context-length", "320"}})
	var limit int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, limit = servedID(t, e.base); limit < 4096 {
			break
		}
	}
	if limit != 336 {
		t.Fatalf("max_model_len %d, want 336 (the KV cache's positions)", limit)
	}
	code, body := e.post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 400})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "--kv-cache-mb") || !strings.Contains(string(body), "336") {
		t.Fatalf("%d %s, want a 400 naming the KV cache's 336 positions and --kv-cache-mb", code, body)
	}
	code, body = e.post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 3, "temperature": 0})
	if code != http.StatusOK {
		t.Fatalf("a request that fits: %d %s", code, body)
	}
}

// `make run MODEL=DIR LOG_FORMAT=json` serves DIR and writes nothing but JSON lines: durations in
// seconds, enums by name, the 400's reason and the request id on the lines about a request.
func TestMakeRunJSONLogs(t *testing.T) {
	port := freePort(t)
	cmd := exec.Command("../scripts/run.sh")
	cmd.Env = runEnv(port, t.TempDir(), "MODEL_PATH=", "MODEL="+myModel(t), "LOG_FORMAT=json")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("---- make run output ----\n%s", tail(out.String(), 6000))
		}
	})
	m := &runScript{t: t, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	m.served(60 * time.Second)
	if id, _ := servedID(t, m.base); id != "my-model" {
		t.Fatalf("make run MODEL=... serves %q, want my-model", id)
	}
	post := func(body, rid string) int {
		req, _ := http.NewRequest("POST", m.base+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", rid)
		resp, err := freshClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(`{"prompt":"hi","max_tokens":"two"}`, "rid-bad-type"); c != http.StatusBadRequest {
		t.Fatalf("bad type: %d", c)
	}
	if c := post(`{"prompt":"hi","max_tokens":2,"user":"u1"}`, "rid-ignored"); c != http.StatusOK {
		t.Fatalf("ignored field: %d", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	stopped = true

	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader([]byte(out.String())))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		if m["proc"] == nil || m["msg"] == nil {
			t.Fatalf("a line without proc or msg: %q", sc.Text())
		}
		lines = append(lines, m)
	}
	var badLine, ignoredLine bool
	for _, l := range lines {
		if v, ok := l["method"]; ok {
			if _, isNum := v.(json.Number); isNum {
				t.Errorf("an enum written as a number: %v", l)
			}
		}
		if _, ok := l["duration"]; ok {
			t.Errorf("a duration without unit: %v", l)
		}
		if l["request_id"] == "rid-bad-type" && l["msg"] == "request" {
			badLine = strings.Contains(l["error"].(string), "max_tokens")
		}
		if l["request_id"] == "rid-ignored" && strings.Contains(l["msg"].(string), "ignored") {
			ignoredLine = true
		}
	}
	if len(lines) < 10 || !badLine || !ignoredLine {
		t.Fatalf("%d JSON lines; the 400's access line with its reason: %v; the ignored-fields warning with its request id: %v",
			len(lines), badLine, ignoredLine)
	}
}

// Every scrape, whichever worker answers it, shows every worker's own series (in flight,
// connections, process and Go runtime), every process's process_* series, and the build.
func TestMetricsEveryWorkerAndProcess(t *testing.T) {
	e := startEngine(t, engineOpts{workers: 2, dpSize: 2})
	time.Sleep(1500 * time.Millisecond) // each worker has published once
	// Every rank's and detokd's Go runtime series, which they send with their load reports.
	var goSeries []string
	for _, proc := range []string{`process="schedulerd",rank="0"`, `process="schedulerd",rank="1"`, `process="detokd"`} {
		for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes", "go_gc_cycles_total"} {
			goSeries = append(goSeries, name+"{"+proc+"} ")
		}
		goSeries = append(goSeries, "go_info{"+proc+`,version="go`)
	}
	for i := 0; i < 8; i++ {
		resp, err := freshClient.Get(e.base + "/metrics") // a fresh connection: either worker answers
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body := string(b)
		for _, want := range []string{
			`llm_worker_in_flight_requests{worker="0"} `, `llm_worker_in_flight_requests{worker="1"} `,
			`llm_http_connections_open{worker="0"} `, `llm_http_connections_open{worker="1"} `,
			`process_resident_memory_bytes{process="tokenizerd-worker",worker="1"} `,
			`go_goroutines{process="tokenizerd-worker",worker="0"} `,
			`process_resident_memory_bytes{process="schedulerd",rank="0"} `,
			`process_cpu_seconds_total{process="detokd"} `,
			`process_open_fds{process="tokenizerd"} `,
			`process_start_time_seconds{process="schedulerd",rank="0"} `,
			`llmserve_build_info{version="`,
		} {
			if !strings.Contains(body, want) {
				t.Fatalf("scrape %d lacks %s", i, want)
			}
		}
		for _, want := range goSeries {
			v, ok := scrapedValue(body, want)
			if !ok || v <= 0 && !strings.HasPrefix(want, "go_gc_cycles_total") {
				t.Fatalf("scrape %d: %s is %v (present %v)\n%s", i, want, v, ok, body)
			}
		}
	}
}

// scrapedValue is the value of the first sample line of body that starts with prefix.
func scrapedValue(body, prefix string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v, err == nil
		}
	}
	return 0, false
}

// `schedulerd quantize IN OUT --type T` writes a GGUF file of T with progress on stderr, which
// the engine then serves (llama.cpp loads the same files: see the README).
func TestQuantizeCommand(t *testing.T) {
	dir := t.TempDir()
	var served string
	for _, typ := range []string{"q8_0", "q4_k", "q4_0", "q6_k"} {
		out := filepath.Join(dir, "pico-"+typ+".gguf")
		b, err := exec.Command(filepath.Join(binDir, "schedulerd"), "quantize", modelPath, out, "--type", typ).CombinedOutput()
		if err != nil || !strings.Contains(string(b), "quantizing") || !strings.Contains(string(b), "wrote") {
			t.Fatalf("quantize %s: %v\n%s", typ, err, b)
		}
		g, err := exec.Command(filepath.Join(binDir, "schedulerd"), "generate", "--model-path", out, "--input-ids", "400,1234,87", "--max-new-tokens", "3").Output()
		if err != nil || !strings.Contains(string(g), `"output_ids":[`) {
			t.Fatalf("generate on the %s file: %v %s", typ, err, g)
		}
		served = out
	}
	b, err := exec.Command(filepath.Join(binDir, "schedulerd"), "quantize", modelPath, filepath.Join(dir, "x.gguf"), "--type", "q9").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 78 {
		t.Fatalf("an unknown type: %v, want exit status 78\n%s", err, b)
	}
	e := startEngine(t, engineOpts{model: served})
	code, body := e.post("/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 4, "temperature": 0})
	if code != http.StatusOK {
		t.Fatalf("serving the quantized file: %d %s", code, body)
	}
}

// The README's constrained examples (structured output, grammars, tools) answer on `make run`'s
// pico and finish by their constraint, not by running to max_tokens.
func TestReadmeConstrainedExamplesFinish(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	type example struct{ path, body string }
	var examples []example
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "curl -s") || !strings.Contains(lines[i], " -d '") {
			continue
		}
		cmd := lines[i]
		for strings.Count(cmd, "'")%2 == 1 && i+1 < len(lines) {
			i++
			cmd += "\n" + lines[i]
		}
		_, rest, _ := strings.Cut(cmd, "localhost:30000")
		path, _, _ := strings.Cut(rest, " ")
		_, body, _ := strings.Cut(cmd, " -d '")
		body = strings.TrimSuffix(strings.TrimSpace(body), "'")
		if strings.Contains(body, "response_format") || strings.Contains(body, `"tools"`) ||
			strings.Contains(body, `"grammar"`) || strings.Contains(body, `"regex"`) {
			examples = append(examples, example{path, body})
		}
	}
	if len(examples) < 4 {
		t.Fatalf("found %d constrained examples in the README", len(examples))
	}
	e := startEngine(t, engineOpts{})
	for _, ex := range examples {
		for try := 0; try < 3; try++ { // sampled: each run must finish
			code, body := e.postRaw(ex.path, ex.body)
			if code != http.StatusOK {
				t.Fatalf("%s %s: %d %s", ex.path, ex.body, code, body)
			}
			if strings.Contains(string(body), `"finish_reason":"length"`) || strings.Contains(string(body), `"type":"length"`) {
				t.Errorf("%s %s ran to its token limit: %s", ex.path, ex.body, body)
			}
		}
	}
}
