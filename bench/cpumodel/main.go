// Command cpumodel compares the engine's CPU model path with llama.cpp on the same GGUF files:
// decode with one sequence, decode with 16, and a 512-token prefill, for BF16, Q8_0 and Q4_K
// weights, engines alternating, each run its own process inside `flock /tmp/perf.lock`. It prints
// min and median tok/s of each over the rounds, the machine's measured read bandwidth, and each
// decode figure as a fraction of the memory-bandwidth roofline.
//
// llama.cpp runs through ../shared/peers/llamacpp's setup (`run.sh setup model`, which puts
// node-llama-cpp's prebuilt CPU build, membw and a random Qwen3-0.6B-shaped BF16 checkpoint under
// WORK, default /tmp/llamacpp-peer). The GGUF files both engines read are written here, by the
// project's own GGUF writer and quantizers, from that checkpoint.
//
//	go run ./bench/cpumodel [-rounds 3] [-types bf16,q8_0,q4_k] [-whats dec1,dec16,prefill]
//	go run ./bench/cpumodel -exactness   # dequantization and logits vs llama.cpp instead
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/llmserve/llmserve/bench/internal/perfhost"
	"github.com/llmserve/llmserve/gguf"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
	"github.com/llmserve/llmserve/tokenizer"
)

//go:embed csrc/deqcheck.c
var deqcheckSource []byte

// options are the command's flags.
type options struct {
	work, modelDir, lock string
	rounds, threads      int
	types, whats         []string
	oursKVBytes          int
	force                bool
	// quietIdle and quietWait: before each timed run, wait up to quietWait for this idle share.
	quietIdle float64
	quietWait time.Duration
	// exactLogits and fixtures select the parts of -exactness beyond dequantization.
	exactLogits bool
	fixtures    string
	// bf16Acts runs our engine with --bf16-activations.
	bf16Acts bool
}

func main() {
	var o options
	var types, whats string
	flag.StringVar(&o.work, "work", envOr("WORK", "/tmp/llamacpp-peer"), "the llama.cpp peer's work directory (run.sh setup model)")
	flag.StringVar(&o.modelDir, "model", "", "safetensors checkpoint the GGUFs are made from (default WORK/models/qwen3-0.6b-random)")
	flag.StringVar(&o.lock, "lock", envOr("PERF_LOCK", "/tmp/perf.lock"), "lock file every timed run holds (flock)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every workload on both engines")
	flag.IntVar(&o.threads, "threads", 2, "threads for both engines")
	flag.StringVar(&types, "types", "bf16,q8_0,q4_k", "weight types")
	flag.StringVar(&whats, "whats", "dec1,dec16,prefill", "workloads: dec1, dec16, prefill")
	flag.IntVar(&o.oursKVBytes, "ours-kv-bytes", 2, "bytes per KV element in our engine (--kv-cache-dtype auto: 16-bit for 16-bit and quantized weights)")
	flag.BoolVar(&o.force, "force", false, "rewrite the GGUF files even if they exist")
	flag.Float64Var(&o.quietIdle, "quiet-idle", 0.8, "idle share of the cores to wait for before each timed run")
	flag.DurationVar(&o.quietWait, "quiet-wait", 90*time.Second, "longest wait for -quiet-idle (the run goes ahead after it either way)")
	flag.BoolVar(&o.bf16Acts, "bf16-activations", false, "run our engine as with --bf16-activations (activations rounded to bf16 for BF16 weights, as llama.cpp does); with -worker, the worker's mode")
	exactness := flag.Bool("exactness", false, "check dequantization and logits against llama.cpp instead of timing")
	flag.BoolVar(&o.exactLogits, "exactness-logits", true, "with -exactness, also compare logits (slow: llama.cpp and ours on every prompt)")
	flag.StringVar(&o.fixtures, "fixtures", "testdata/models", "with -exactness, fixture models whose GGUF (our writer) llama.cpp must run as Hugging Face did; empty: skip")
	summarize := flag.String("summarize", "", "print the table from the progress log (stderr) of an earlier or interrupted run")
	worker := flag.String("worker", "", "internal: time our engine on this GGUF (with -what, -batch) and print JSON")
	what := flag.String("what", "", "internal: prefill or decode")
	batch := flag.Int("batch", 1, "internal: decode sequences")
	logits := flag.String("logits", "", "internal: prompts file; print our logits on -worker's GGUF")
	widen := flag.Bool("widen", false, "internal: with -logits, dequantize the weights to float32 first")
	cpuProfile := flag.String("cpuprofile", "", "with -worker, write a CPU profile of our engine's run to this file (go tool pprof)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("cpumodel: ")
	if *worker != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if *logits != "" {
			err = runOursLogits(*worker, *logits, *widen)
		} else {
			err = runOurs(*worker, *what, *batch, o.bf16Acts)
		}
		stop()
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	o.types, o.whats = strings.Split(types, ","), strings.Split(whats, ",")
	if o.modelDir == "" {
		o.modelDir = filepath.Join(o.work, "models", "qwen3-0.6b-random")
	}
	if *summarize != "" {
		if err := summarizeLog(o, *summarize); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := checkPeer(o); err != nil {
		log.Fatal(err)
	}
	files, err := prepareGGUFs(o)
	if err != nil {
		log.Fatal(err)
	}
	if *exactness {
		err = runExactness(o, files)
	} else {
		err = runBench(o, files)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func checkPeer(o options) error {
	for _, p := range []string{"peer/bench.mjs", "peer/logits.mjs", "peer/node_modules/node-llama-cpp", "bin/membw", "models/qwen3-0.6b-random/config.json"} {
		if _, err := os.Stat(filepath.Join(o.work, p)); err != nil {
			return fmt.Errorf("%s is missing: run ENGINE_SRC=<checkout> ../shared/peers/llamacpp/run.sh setup model first (%v)", filepath.Join(o.work, p), err)
		}
	}
	return nil
}

// prepareGGUFs writes the checkpoint as a GGUF of each weight type (our writer, our quantizers),
// unless the file exists already.
func prepareGGUFs(o options) (map[string]string, error) {
	files := map[string]string{}
	for _, name := range o.types {
		t, err := quant.ParseType(name)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(o.work, "gguf", "llmserve-"+filepath.Base(o.modelDir)+"-"+t.String()+".gguf")
		files[name] = path
		if _, err := os.Stat(path); err == nil && !o.force {
			log.Printf("using %s", path)
			continue
		}
		start := time.Now()
		log.Printf("writing %s (%s) from %s", path, t, o.modelDir)
		m, err := model.Load(o.modelDir)
		if err != nil {
			return nil, err
		}
		if m.Layers[0].QKV.Type != t {
			if err := model.Quantize(m, t); err != nil {
				return nil, err
			}
		}
		w, err := m.GGUFWriter()
		if err != nil {
			return nil, err
		}
		if err := tokenizer.SetGGUFMetadata(w, o.modelDir, m.Config.VocabSize); err != nil {
			return nil, err
		}
		tmp := path + ".tmp"
		if err := w.WriteFile(tmp); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, err
		}
		st, _ := os.Stat(path)
		log.Printf("wrote %s: %d MiB in %v", path, st.Size()>>20, time.Since(start).Round(time.Second))
	}
	return files, nil
}

// locked runs a command holding the perf lock (flock) and returns its stdout. Once it holds the
// lock it waits, up to -quiet-wait, for the machine's cores to be -quiet-idle idle, since other
// work on a shared machine (builds, tests) slows llama.cpp's spinning threads far more than ours.
func locked(o options, env []string, name string, args ...string) ([]byte, error) {
	unlock, err := perfhost.Lock(o.lock)
	if err != nil {
		return nil, err
	}
	defer unlock()
	lastIdle = perfhost.WaitQuiet(o.quietIdle, o.quietWait)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, perfhost.Tail(errb.String(), 2000))
	}
	return out.Bytes(), nil
}

// lastIdle is the idle share of the cores measured just before the latest locked run.
var lastIdle float64

// run is one timed measurement.
type run struct {
	engine, typ, what string
	tokS              float64
	err               error
}

// timeOurs runs our engine once in a fresh process with make run's thread settings.
func timeOurs(o options, path, what string) (float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	w, b := "decode", 1
	switch what {
	case "prefill":
		w = "prefill"
	case "dec16":
		b = 16
	}
	th := strconv.Itoa(o.threads)
	out, err := locked(o, []string{"GOMAXPROCS=" + th, "OPENBLAS_NUM_THREADS=" + th}, exe,
		"-worker", path, "-what", w, "-batch", strconv.Itoa(b), "-bf16-activations="+strconv.FormatBool(o.bf16Acts))
	if err != nil {
		return 0, err
	}
	var r workerResult
	if err := json.Unmarshal(perfhost.LastLine(out), &r); err != nil {
		return 0, fmt.Errorf("our worker printed %q: %w", out, err)
	}
	return r.TokS, nil
}

// timeLlama runs llama.cpp (peer/bench.mjs) once.
func timeLlama(o options, path, what string) (float64, error) {
	args := []string{filepath.Join(o.work, "peer", "bench.mjs"), "--model", path, "--threads", strconv.Itoa(o.threads)}
	switch what {
	case "prefill":
		args = append(args, "--what", "prefill")
	case "dec1":
		args = append(args, "--what", "decode", "--batches", "1")
	case "dec16":
		args = append(args, "--what", "decode", "--batches", "16")
	}
	out, err := locked(o, nil, "node", args...)
	if err != nil {
		return 0, err
	}
	var r struct {
		Results []struct {
			TokS float64 `json:"tok_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal(perfhost.LastLine(out), &r); err != nil || len(r.Results) != 1 {
		return 0, fmt.Errorf("bench.mjs printed %q: %v", out, err)
	}
	return r.Results[0].TokS, nil
}

// membw measures the read bandwidth with the run's thread count (GB/s, best of its reps).
func membw(o options) (float64, error) {
	out, err := locked(o, nil, filepath.Join(o.work, "bin", "membw"), strconv.Itoa(o.threads), "1024", "15")
	if err != nil {
		return 0, err
	}
	var r struct {
		Best float64 `json:"best_gb_s"`
	}
	if err := json.Unmarshal(perfhost.LastLine(out), &r); err != nil {
		return 0, fmt.Errorf("membw printed %q: %w", out, err)
	}
	return r.Best, nil
}

func runBench(o options, files map[string]string) error {
	var runs []run
	var bws []float64
	// A type our backend cannot run is found once, untimed, instead of in every round.
	unsupported := map[string]error{}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, typ := range o.types {
		if out, err := exec.Command(exe, "-worker", files[typ], "-what", "check").CombinedOutput(); err != nil {
			unsupported[typ] = fmt.Errorf("%s", perfhost.LastLine(out))
			log.Printf("llmserve cannot run %s: %s", typ, perfhost.LastLine(out))
		}
	}
	total := len(o.whats) * (1 + o.rounds*(2*len(o.types)-len(unsupported)))
	n := 0
	start := time.Now()
	progress := func(format string, a ...any) {
		n++
		log.Printf("[%d/%d %v] %s", n, total, time.Since(start).Round(time.Second), fmt.Sprintf(format, a...))
	}
	// Workload by workload, so that an interrupted run has whole rounds of the first ones; the
	// engines alternate within each round, and which goes first alternates between rounds.
	for _, what := range o.whats {
		bw, err := membw(o)
		if err != nil {
			return err
		}
		bws = append(bws, bw)
		progress("round %d: read bandwidth %.1f GB/s (idle before: %.2f)", len(bws), bw, lastIdle)
		for r := 1; r <= o.rounds; r++ {
			for _, typ := range o.types {
				engines := []string{"llmserve", "llama.cpp"}
				if r%2 == 0 {
					slices.Reverse(engines)
				}
				for _, eng := range engines {
					var tokS float64
					var err error
					if eng == "llmserve" {
						if e := unsupported[typ]; e != nil {
							runs = append(runs, run{engine: eng, typ: typ, what: what, err: e})
							continue
						}
						tokS, err = timeOurs(o, files[typ], what)
					} else {
						tokS, err = timeLlama(o, files[typ], what)
					}
					runs = append(runs, run{engine: eng, typ: typ, what: what, tokS: tokS, err: err})
					if err != nil {
						progress("round %d %s %s %s: %v", r, eng, typ, what, firstLine(err.Error()))
					} else {
						progress("round %d %s %s %s: %.1f tok/s (idle before: %.2f)", r, eng, typ, what, tokS, lastIdle)
					}
				}
			}
		}
	}
	return report(o, files, runs, bws)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stats is min and median of the successful runs.
func stats(runs []run, eng, typ, what string) (lo, med float64, n int, errText string) {
	var v []float64
	for _, r := range runs {
		if r.engine == eng && r.typ == typ && r.what == what {
			if r.err != nil {
				errText = firstLine(r.err.Error())
				continue
			}
			v = append(v, r.tokS)
		}
	}
	if len(v) == 0 {
		return 0, 0, 0, errText
	}
	slices.Sort(v)
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[0], med, len(v), ""
}

// modelBytes is what one decode step reads from memory: every tensor of the GGUF once (a tied
// embedding is read whole as the LM head), and the KV cache bytes per token of context.
func modelBytes(path string, cfg model.Config) (weights float64, kvPerPos float64, err error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	for _, t := range f.Tensors {
		weights += float64(t.Size)
	}
	return weights, float64(2 * cfg.NumLayers * cfg.NumKVHeads * cfg.HeadDim), nil
}

func report(o options, files map[string]string, runs []run, bws []float64) error {
	bw := slices.Max(bws) * 1e9
	cfg, err := model.LoadConfig(o.modelDir)
	if err != nil {
		return err
	}
	avgCtx := decodePrompt + decodeWarmup + float64(decodeNew-1)/2
	fmt.Printf("\nModel %s (%d layers, hidden %d, vocab %d), %d threads, %d rounds, engines alternating, each run in its own process under flock %s.\n",
		filepath.Base(o.modelDir), cfg.NumLayers, cfg.HiddenSize, cfg.VocabSize, o.threads, o.rounds, o.lock)
	fmt.Printf("Read bandwidth (membw, %d threads, 1 GiB): best of each measurement (one before each workload) %s GB/s; the roofline uses %.1f GB/s.\n",
		o.threads, joinF(bws), bw/1e9)
	if o.bf16Acts {
		fmt.Printf("llmserve runs with --bf16-activations (activations rounded to bf16 for BF16 weights, as llama.cpp does).\n")
	}
	fmt.Printf("Roofline (decode): every GGUF tensor read once per step, plus K and V of the average context (%.1f positions; llmserve %d bytes per element, llama.cpp f16).\n\n", avgCtx, o.oursKVBytes)
	fmt.Println("| workload | weights | llmserve tok/s min / median | llama.cpp tok/s min / median | llmserve / llama.cpp (median) | roofline tok/s llmserve / llama.cpp | fraction of roofline llmserve / llama.cpp (median) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	names := map[string]string{"dec1": "decode, batch 1", "dec16": "decode, 16 sequences", "prefill": "prefill, 512 tokens"}
	for _, what := range o.whats {
		for _, typ := range o.types {
			w, kv, err := modelBytes(files[typ], cfg)
			if err != nil {
				return err
			}
			cell := func(eng string) (string, float64) {
				lo, med, n, e := stats(runs, eng, typ, what)
				switch {
				case n == 0 && e == "":
					return "not run", 0
				case n == 0:
					return "failed: " + e, 0
				}
				return fmt.Sprintf("%.1f / %.1f (n=%d)", lo, med, n), med
			}
			oc, om := cell("llmserve")
			lc, lm := cell("llama.cpp")
			ratio := "-"
			if om > 0 && lm > 0 {
				ratio = fmt.Sprintf("%.2fx", om/lm)
			}
			roof, frac := "- (compute-bound)", "-"
			if what != "prefill" {
				b := 1.0
				if what == "dec16" {
					b = 16
				}
				ro := b * bw / (w + b*kv*avgCtx*float64(o.oursKVBytes))
				rl := b * bw / (w + b*kv*avgCtx*2)
				roof = fmt.Sprintf("%.1f / %.1f", ro, rl)
				frac = fmt.Sprintf("%s / %s", fracOf(om, ro), fracOf(lm, rl))
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", names[what], typ, oc, lc, ratio, roof, frac)
		}
	}
	return nil
}

func fracOf(x, roof float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x/roof)
}

func joinF(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}

// runExactness checks, for each GGUF: that llama.cpp's parser and dequantizers (libggml-base.so,
// through deqcheck.c) give every tensor bit for bit the values ours do, and our last-position
// logits against llama.cpp's (peer/logits.mjs, compare.mjs) on the same file.
func runExactness(o options, files map[string]string) error {
	lib := filepath.Join(o.work, "peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so")
	dir, err := os.MkdirTemp("", "cpumodel-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "deqcheck.c")
	bin := filepath.Join(dir, "deqcheck")
	if err := os.WriteFile(src, deqcheckSource, 0o644); err != nil {
		return err
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		return fmt.Errorf("build deqcheck: %v\n%s", err, out)
	}
	cfg, err := model.LoadConfig(o.modelDir)
	if err != nil {
		return err
	}
	prompts := []map[string]any{
		{"input_ids": []int32{5, 7, 9}, "new_tokens": 16},
		{"input_ids": promptTokens(64, cfg.VocabSize, 7), "new_tokens": 16},
		{"input_ids": promptTokens(200, cfg.VocabSize, 11), "new_tokens": 8},
	}
	pj, _ := json.Marshal(prompts)
	promptsPath := filepath.Join(dir, "prompts.json")
	if err := os.WriteFile(promptsPath, pj, 0o644); err != nil {
		return err
	}
	if o.fixtures != "" {
		if err := fixtureCheck(o, dir); err != nil {
			return err
		}
	}
	for _, typ := range o.types {
		path := files[typ]
		log.Printf("%s: dequantizing every tensor with llama.cpp's libggml-base and ours", typ)
		out, err := exec.Command(bin, lib, path).Output()
		if err != nil {
			return fmt.Errorf("deqcheck %s: %w", path, err)
		}
		same, total, err := compareDequant(path, out)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d of %d tensors dequantize bit for bit as llama.cpp's (%s)\n", typ, same, total, filepath.Base(path))
		if !o.exactLogits {
			continue
		}

		log.Printf("%s: logits, llama.cpp (F32 KV, flash attention off) and ours", typ)
		peer, err := locked(o, nil, "node", filepath.Join(o.work, "peer", "logits.mjs"), "--model", path, "--prompts", promptsPath,
			"--kv", "f32", "--flash", "off", "--threads", strconv.Itoa(o.threads))
		if err != nil {
			return err
		}
		exe, _ := os.Executable()
		label := "llmserve"
		ours, err := locked(o, []string{"GOMAXPROCS=" + strconv.Itoa(o.threads)}, exe, "-worker", path, "-logits", promptsPath)
		if err != nil && strings.Contains(err.Error(), "cannot multiply") {
			// No quantized kernels in this build: compare with the exactly dequantized weights.
			label = "llmserve with the weights dequantized to f32 (this build multiplies no " + typ + ")"
			ours, err = locked(o, []string{"GOMAXPROCS=" + strconv.Itoa(o.threads)}, exe, "-worker", path, "-logits", promptsPath, "-widen")
		}
		if err != nil {
			return err
		}
		pp, op := filepath.Join(dir, typ+".peer.json"), filepath.Join(dir, typ+".ours.json")
		if err := errors.Join(os.WriteFile(pp, peer, 0o644), os.WriteFile(op, ours, 0o644)); err != nil {
			return err
		}
		compare := filepath.Join(peerScripts(), "compare.mjs")
		res, err := exec.Command("node", compare, "--ours", op, "--peer", pp, "--label",
			fmt.Sprintf("%s GGUF: %s vs llama.cpp (F32 KV, flash attention off)", typ, label)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("compare.mjs: %v\n%s", err, res)
		}
		for _, line := range strings.Split(string(res), "\n") {
			if !strings.HasPrefix(line, "SUMMARY") {
				fmt.Println(line)
			}
		}
	}
	return nil
}

// peerScripts is the directory of the peer's scripts (compare.mjs): PEER_DIR, default the
// shared checkout's ../shared/peers/llamacpp.
func peerScripts() string {
	return envOr("PEER_DIR", "/work/shared/peers/llamacpp")
}

// compareDequant hashes our dequantization of every tensor of path the way deqcheck does and
// counts the tensors whose hashes match its output.
func compareDequant(path string, deq []byte) (same, total int, err error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	theirs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(deq)), "\n") {
		fs := strings.Fields(line)
		if len(fs) == 4 {
			theirs[fs[0]] = fs[3]
		}
	}
	buf := make([]float32, 0)
	for _, t := range f.Tensors {
		raw, err := f.TensorData(t)
		if err != nil {
			return 0, 0, err
		}
		n := int(t.Elements())
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		buf = buf[:n]
		if err := quant.Dequantize(t.Type, raw, buf); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", t.Name, err)
		}
		// deqcheck hashes the floats' bytes in memory order (little-endian on amd64, as here).
		h := fnv.New64a()
		if n > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), 4*n))
		}
		total++
		if fmt.Sprintf("%016x", h.Sum64()) == theirs[t.Name] {
			same++
		} else if total-same <= 5 {
			log.Printf("%s (%s): dequantized values differ from llama.cpp's", t.Name, t.Type)
		}
	}
	if len(theirs) != total {
		return same, total, fmt.Errorf("llama.cpp listed %d tensors, we read %d", len(theirs), total)
	}
	return same, total, nil
}

// fixtureCheck writes each fixture model (F32 weights) as GGUF with our writer and a synthetic
// vocabulary, runs llama.cpp on the fixture's prompts, and compares its logits and greedy ids with
// Hugging Face's (expected.json): this checks our tensor names, q/k permutation (llama) and
// rope_freqs (llama32) against llama.cpp's own reading of them.
func fixtureCheck(o options, dir string) error {
	for _, name := range []string{"llama", "llama32", "qwen2", "qwen3"} {
		fdir := filepath.Join(o.fixtures, name)
		m, err := model.Load(fdir)
		if err != nil {
			return err
		}
		w, err := m.GGUFWriter()
		if err != nil {
			return err
		}
		if err := toyVocabulary(w, m.Config); err != nil {
			return err
		}
		path := filepath.Join(dir, "fixture-"+name+".gguf")
		if err := w.WriteFile(path); err != nil {
			return err
		}
		var exp struct {
			Prompts []struct {
				InputIDs     []int32 `json:"input_ids"`
				GreedyNewIDs []int32 `json:"greedy_new_ids"`
			} `json:"prompts"`
		}
		data, err := os.ReadFile(filepath.Join(fdir, "expected.json"))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &exp); err != nil {
			return err
		}
		var prompts []map[string]any
		for _, p := range exp.Prompts {
			prompts = append(prompts, map[string]any{"input_ids": p.InputIDs, "new_tokens": len(p.GreedyNewIDs)})
		}
		pj, _ := json.Marshal(prompts)
		pp := filepath.Join(dir, name+".prompts.json")
		if err := os.WriteFile(pp, pj, 0o644); err != nil {
			return err
		}
		log.Printf("fixture %s: llama.cpp on our GGUF", name)
		peer, err := locked(o, nil, "node", filepath.Join(o.work, "peer", "logits.mjs"), "--model", path, "--prompts", pp,
			"--kv", "f32", "--flash", "off", "--threads", strconv.Itoa(o.threads))
		if err != nil {
			return err
		}
		out := filepath.Join(dir, name+".peer.json")
		if err := os.WriteFile(out, peer, 0o644); err != nil {
			return err
		}
		// expected.json has the shape compare.mjs reads for an engine's output.
		res, err := exec.Command("node", filepath.Join(peerScripts(), "compare.mjs"), "--ours", filepath.Join(fdir, "expected.json"),
			"--peer", out, "--label", fmt.Sprintf("fixture %s, F32 GGUF written by llmserve: Hugging Face (as \"ours\") vs llama.cpp", name)).CombinedOutput()
		if err != nil {
			return fmt.Errorf("compare.mjs: %v\n%s", err, res)
		}
		for _, line := range strings.Split(string(res), "\n") {
			if !strings.HasPrefix(line, "SUMMARY") {
				fmt.Println(line)
			}
		}
	}
	return nil
}

// toyVocabulary gives a fixture model without tokenizer files a byte-level vocabulary llama.cpp
// accepts: the 256 byte tokens, then placeholder tokens up to the model's vocabulary size.
func toyVocabulary(w *gguf.Writer, cfg model.Config) error {
	tokens := make([]string, cfg.VocabSize)
	types := make([]int32, cfg.VocabSize)
	for i := range tokens {
		types[i] = 1
		if i < 256 {
			tokens[i] = byteLevelChar(byte(i))
		} else {
			tokens[i] = fmt.Sprintf("<t%d>", i)
			types[i] = 4
		}
	}
	err := errors.Join(w.Set("tokenizer.ggml.model", "gpt2"), w.Set("tokenizer.ggml.pre", "gpt-2"),
		w.Set("tokenizer.ggml.tokens", tokens), w.Set("tokenizer.ggml.token_type", types),
		w.Set("tokenizer.ggml.merges", []string{byteLevelChar('a') + " " + byteLevelChar('b')}))
	if cfg.HasBOS {
		err = errors.Join(err, w.Set("tokenizer.ggml.bos_token_id", uint32(cfg.BOSTokenID)))
	}
	if len(cfg.EOSTokenIDs) > 0 {
		err = errors.Join(err, w.Set("tokenizer.ggml.eos_token_id", uint32(cfg.EOSTokenIDs[0])))
	}
	return errors.Join(err, w.Set("tokenizer.ggml.add_bos_token", false))
}

// byteLevelChar is GPT-2's printable stand-in for a byte.
func byteLevelChar(b byte) string {
	n := 0
	for c := 0; c < 256; c++ {
		printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE && c <= 0xFF
		if c == int(b) {
			if printable {
				return string(rune(c))
			}
			return string(rune(256 + n))
		}
		if !printable {
			n++
		}
	}
	return ""
}

// summarizeLog rebuilds the table from the progress lines of a run's log ("round R ENGINE TYPE
// WHAT: X tok/s", "round R: read bandwidth X GB/s"), so an interrupted run still reports what it
// measured.
func summarizeLog(o options, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var runs []run
	var bws []float64
	rounds := 0
	for _, line := range strings.Split(string(data), "\n") {
		_, rest, ok := strings.Cut(line, "] round ")
		if !ok {
			continue
		}
		var r int
		var x float64
		if n, _ := fmt.Sscanf(rest, "%d: read bandwidth %g GB/s", &r, &x); n == 2 {
			bws = append(bws, x)
			rounds = max(rounds, r)
			continue
		}
		var eng, typ, what string
		if n, _ := fmt.Sscanf(rest, "%d %s %s %s %g tok/s", &r, &eng, &typ, &what, &x); n == 5 {
			runs = append(runs, run{engine: eng, typ: typ, what: strings.TrimSuffix(what, ":"), tokS: x})
			rounds = max(rounds, r)
		} else if n >= 4 {
			runs = append(runs, run{engine: eng, typ: typ, what: strings.TrimSuffix(what, ":"), err: errors.New(firstLine(rest))})
		}
	}
	if len(bws) == 0 {
		return fmt.Errorf("%s: no bandwidth measurement", path)
	}
	o.rounds = rounds
	if o.modelDir == "" {
		o.modelDir = filepath.Join(o.work, "models", "qwen3-0.6b-random")
	}
	files := map[string]string{}
	for _, typ := range o.types {
		t, err := quant.ParseType(typ)
		if err != nil {
			return err
		}
		files[typ] = filepath.Join(o.work, "gguf", "llmserve-"+filepath.Base(o.modelDir)+"-"+t.String()+".gguf")
	}
	return report(o, files, runs, bws)
}

// startCPUProfile starts a CPU profile written to path (none when path is empty) and returns
// the function that stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Printf("cpu profile %s: %v", path, err)
		}
	}, nil
}
