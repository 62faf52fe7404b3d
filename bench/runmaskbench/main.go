// Command runmaskbench runs the MaskBench JSON-schema constrained-decoding
// benchmark (guidance-ai/jsonschemabench maskbench data) against package
// grammar, and optionally against the XGrammar peer on the same schemas:
// time to first mask (TTFM), time between masks (TBM), and whether valid
// instances pass and invalid ones are rejected.
//
//	runmaskbench [flags] DIR        (DIR: the unpacked data/ folder)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/tokenizer"
)

type testCase struct {
	Valid bool            `json:"valid"`
	Data  json.RawMessage `json:"data"`
}

type schemaFile struct {
	Schema json.RawMessage `json:"schema"`
	Tests  []testCase      `json:"tests"`
}

// result is one schema's outcome for one engine.
type result struct {
	compileErr string
	ttfm       float64   // microseconds
	tbm        []float64 // microseconds, valid instances only
	validErr   int       // valid instance rejected
	invalidErr int       // invalid instance accepted
	crash      string
	timeout    bool
	detail     string
}

// stats accumulates results over the schemas of one run.
type stats struct {
	name                                                  string
	schemas                                               int
	tbm, ttfm                                             []float64
	pass, compileErrs, validErrs, invalidErrs             int
	crashes, timeouts, schemasValidFail, schemasInvalFail int
	compileReasons                                        map[string]int
}

func newStats(name string) *stats { return &stats{name: name, compileReasons: map[string]int{}} }

// add records r; a schema passes when it compiles and every instance is
// handled correctly.
func (s *stats) add(r result) {
	s.schemas++
	switch {
	case r.timeout:
		s.timeouts++
	case r.crash != "":
		s.crashes++
	case r.compileErr != "":
		s.compileErrs++
		s.compileReasons[reasonKey(r.compileErr)]++
	default:
		s.ttfm = append(s.ttfm, r.ttfm)
		s.tbm = append(s.tbm, r.tbm...)
		s.validErrs += r.validErr
		s.invalidErrs += r.invalidErr
		if r.validErr > 0 {
			s.schemasValidFail++
		}
		if r.invalidErr > 0 {
			s.schemasInvalFail++
		}
		if r.validErr == 0 && r.invalidErr == 0 {
			s.pass++
		}
	}
}

// outcome names r's result in one word.
func (r result) outcome() string {
	switch {
	case r.timeout:
		return "timeout"
	case r.crash != "":
		return "crash"
	case r.compileErr != "":
		return "compile-error"
	case r.invalidErr > 0:
		return "invalidation-error"
	case r.validErr > 0:
		return "validation-error"
	}
	return "pass"
}

func (s *stats) progress() string {
	return fmt.Sprintf("pass %d compile-err %d valid-err %d invalid-err %d crash %d timeout %d",
		s.pass, s.compileErrs, s.validErrs, s.invalidErrs, s.crashes, s.timeouts)
}

func main() {
	tokDir := flag.String("tokenizer", "../shared/fixtures/tokenizer-files/llama3", "tokenizer directory (tokenizer.json + tokenizer_config.json)")
	limit := flag.Int("limit", 0, "run only the first N schemas (sorted by file name); 0 = all")
	sample := flag.Int("sample", 0, "run a random sample of N schemas (see -seed); 0 = all")
	seed := flag.Uint64("seed", 1, "seed of the -sample draw")
	match := flag.String("match", "", "only schemas whose file name contains this")
	timeout := flag.Duration("timeout", 10*time.Second, "per-schema time limit (compile and all instances)")
	xgr := flag.Bool("xgrammar", false, "also run the XGrammar peer (WebAssembly build, node+npm) on the same schemas and print its figures side by side")
	xgrDir := flag.String("xgrammar-dir", filepath.Join(os.TempDir(), "llmserve-maskbench-xgrammar"), "where the XGrammar npm package is installed (reused between runs)")
	xgrTimeout := flag.Duration("xgrammar-timeout", 0, "per-schema time limit for the peer; 0 = -timeout")
	flexible := flag.Bool("flexible", false, "compile with flexible whitespace")
	verbose := flag.Bool("v", false, "print each failing schema on stderr")
	slow := flag.Duration("slow", time.Second, "report schemas taking longer than this on stderr")
	dataFlag := flag.String("data", "", "MaskBench data directory (same as the DIR argument)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run (our engine only) to this file")
	memProfile := flag.String("memprofile", "", "write an allocation profile of the run (our engine only) to this file")
	cacheSize := flag.Int("cache", 0, "compiled-grammar cache size of the Compiler (0 = the engine default); each schema is compiled once, so the cache only holds earlier grammars in memory")
	cacheBytes := flag.Int64("cache-bytes", 0, "compiled-grammar cache budget in bytes, DFA and masks included (0 = the engine default)")
	perSchema := flag.String("per-schema", "", "write one TSV line per schema (name, TTFM us, masks, max TBM us, outcome, masks over 200 us) to this file")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: runmaskbench [flags] DIR\n\nDIR is MaskBench's data/ folder (tar xzf ../shared/maskbench/data.tar.gz).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	dir := *dataFlag
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	if dir == "" || flag.NArg() > 1 {
		flag.Usage()
		os.Exit(2)
	}
	// Single-threaded, like the published figures.
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()

	tok, err := tokenizer.Load(*tokDir)
	if err != nil {
		slog.Error("load tokenizer", "dir", *tokDir, "err", err)
		os.Exit(1)
	}
	var eos []int32
	if e, ok := tok.EOS(); ok {
		eos = append(eos, e)
	}
	files, err := selectFiles(dir, *match, *limit, *sample, *seed)
	if err != nil {
		slog.Error("select schemas", "dir", dir, "err", err)
		os.Exit(1)
	}
	opts := grammar.Options{CacheSize: *cacheSize, CacheBytes: *cacheBytes}
	if *flexible {
		opts.Whitespace = grammar.Flexible
	}
	t0 := time.Now()
	comp := grammar.NewCompiler(tok, eos, opts)
	slog.Info("compiler ready", "vocab", tok.VocabSize(), "schemas", len(files), "took", time.Since(t0))

	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			slog.Error("create CPU profile", "file", *cpuProfile, "err", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			slog.Error("start CPU profile", "err", err)
			os.Exit(1)
		}
	}
	var tsv *os.File
	if *perSchema != "" {
		if tsv, err = os.Create(*perSchema); err != nil {
			slog.Error("create per-schema file", "file", *perSchema, "err", err)
			os.Exit(1)
		}
		defer tsv.Close()
	}
	ours := newStats("llmserve grammar")
	start := time.Now()
	lastProgress := start
	for i, f := range files {
		sf, err := loadSchema(f)
		if err != nil {
			slog.Error("load schema", "file", f, "err", err)
			os.Exit(1)
		}
		name := filepath.Base(f)
		t1 := time.Now()
		r := runOne(comp, tok, eos, sf, *timeout)
		if el := time.Since(t1); el > *slow {
			fmt.Fprintf(os.Stderr, "SLOW %s %.2fs\n", name, el.Seconds())
		}
		ours.add(r)
		if tsv != nil {
			over := 0
			for _, d := range r.tbm {
				if d > 200 {
					over++
				}
			}
			fmt.Fprintf(tsv, "%s\t%.1f\t%d\t%.1f\t%s\t%d\n", name, r.ttfm, len(r.tbm), slices.Max(append([]float64{0}, r.tbm...)), r.outcome(), over)
		}
		r.report(os.Stderr, "", name, true, *verbose)
		if i+1 == len(files) || time.Since(lastProgress) > 10*time.Second {
			lastProgress = time.Now()
			fmt.Fprintf(os.Stderr, "[%d/%d] %s (%.0fs)\n", i+1, len(files), ours.progress(), time.Since(start).Seconds())
		}
	}
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			slog.Error("write allocation profile", "file", *memProfile, "err", err)
			os.Exit(1)
		}
	}
	all := []*stats{ours}
	if *xgr {
		pt := *xgrTimeout
		if pt <= 0 {
			pt = *timeout
		}
		ps, err := runPeer(*xgrDir, *tokDir, tok, eos, files, pt, *verbose)
		if err != nil {
			slog.Error("XGrammar peer", "err", err)
			os.Exit(1)
		}
		all = append(all, ps)
	}
	printTable(os.Stdout, all, len(files), *tokDir, *timeout)
}

// selectFiles lists DIR's schema files sorted by name, then applies -match,
// -sample and -limit in that order.
func selectFiles(dir, match string, limit, sample int, seed uint64) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.json files in %s", dir)
	}
	sort.Strings(files)
	if match != "" {
		files = slices.DeleteFunc(files, func(f string) bool { return !strings.Contains(filepath.Base(f), match) })
	}
	if sample > 0 && sample < len(files) {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		r.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
		files = files[:sample]
		sort.Strings(files)
	}
	if limit > 0 && limit < len(files) {
		files = files[:limit]
	}
	return files, nil
}

func loadSchema(path string) (*schemaFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var sf schemaFile
	if err := json.Unmarshal(raw, &sf); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &sf, nil
}

func printTable(w io.Writer, all []*stats, n int, tokDir string, timeout time.Duration) {
	fmt.Fprintf(w, "MaskBench: %d schemas, tokenizer %s, single-threaded (GOMAXPROCS=1), times in microseconds\n\n", n, tokDir)
	fmt.Fprintf(w, "| metric |")
	for _, s := range all {
		fmt.Fprintf(w, " %s |", s.name)
	}
	fmt.Fprintf(w, "\n|---|")
	for range all {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	row := func(label string, f func(s *stats) string) {
		fmt.Fprintf(w, "| %s |", label)
		for _, s := range all {
			fmt.Fprintf(w, " %s |", f(s))
		}
		fmt.Fprintln(w)
	}
	for _, s := range all {
		slices.Sort(s.tbm)
		slices.Sort(s.ttfm)
	}
	quantiles := []struct {
		label string
		p     float64
	}{{"p25", 0.25}, {"p50", 0.50}, {"p75", 0.75}, {"p90", 0.90}, {"p99", 0.99}, {"p100", 1}}
	for _, q := range quantiles {
		row("TBM "+q.label, func(s *stats) string { return usStr(pct(s.tbm, q.p)) })
	}
	for _, q := range quantiles {
		row("TTFM "+q.label, func(s *stats) string { return usStr(pct(s.ttfm, q.p)) })
	}
	row(fmt.Sprintf("schemas passing (of %d)", n), func(s *stats) string { return fmt.Sprint(s.pass) })
	row("compile errors", func(s *stats) string { return fmt.Sprint(s.compileErrs) })
	row("validation errors (valid instance rejected)", func(s *stats) string {
		return fmt.Sprintf("%d (%d schemas)", s.validErrs, s.schemasValidFail)
	})
	row("invalidation errors (invalid instance accepted)", func(s *stats) string {
		return fmt.Sprintf("%d (%d schemas)", s.invalidErrs, s.schemasInvalFail)
	})
	row("crashes", func(s *stats) string { return fmt.Sprint(s.crashes) })
	row(fmt.Sprintf("timeouts (> %s)", timeout), func(s *stats) string { return fmt.Sprint(s.timeouts) })
	row("masks measured", func(s *stats) string { return fmt.Sprint(len(s.tbm)) })
	for _, s := range all {
		type kv struct {
			k string
			n int
		}
		var reasons []kv
		for k, c := range s.compileReasons {
			reasons = append(reasons, kv{k, c})
		}
		if len(reasons) == 0 {
			continue
		}
		sort.Slice(reasons, func(i, j int) bool {
			if reasons[i].n != reasons[j].n {
				return reasons[i].n > reasons[j].n
			}
			return reasons[i].k < reasons[j].k
		})
		fmt.Fprintf(w, "\nTop compile-error reasons, %s:\n", s.name)
		for i, r := range reasons {
			if i == 25 {
				break
			}
			fmt.Fprintf(w, "%6d  %s\n", r.n, r.k)
		}
	}
}

func usStr(us float64) string {
	if us >= 1000 {
		return fmt.Sprintf("%.0f", us)
	}
	return fmt.Sprintf("%.1f", us)
}

// reasonKey groups compile errors by their message without specifics.
func reasonKey(s string) string {
	if i := strings.Index(s, `"`); i >= 0 {
		j := strings.Index(s[i+1:], `"`)
		if strings.Contains(s, "keyword") || strings.Contains(s, "format") {
			if j >= 0 {
				return s[:i+j+2]
			}
		}
		return s[:i] + "..."
	}
	if len(s) > 80 {
		return s[:80]
	}
	return s
}

// pct is the nearest-rank percentile p (0..1) of sorted xs.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

func runOne(comp *grammar.Compiler, tok *tokenizer.Tokenizer, eos []int32, sf *schemaFile, timeout time.Duration) result {
	done := make(chan result, 1)
	var cancel atomic.Bool
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r.crash = fmt.Sprintf("%v\n%s", p, debug.Stack())
			}
			done <- r
		}()
		r = evaluate(comp, tok, eos, sf, &cancel)
	}()
	select {
	case r := <-done:
		return r
	case <-time.After(timeout):
		// Go cannot stop the goroutine; it notices cancel between instances.
		cancel.Store(true)
		return result{timeout: true}
	}
}

func usSince(t time.Time) float64 { return float64(time.Since(t).Nanoseconds()) / 1e3 }

func evaluate(comp *grammar.Compiler, tok *tokenizer.Tokenizer, eos []int32, sf *schemaFile, cancel *atomic.Bool) result {
	var r result
	words := (tok.VocabSize() + 63) / 64
	mask := make([]uint64, words)
	t0 := time.Now()
	g, err := comp.JSONSchema(string(sf.Schema))
	if err != nil {
		r.compileErr = err.Error()
		return r
	}
	m := g.NewMatcher()
	m.FillMask(mask)
	r.ttfm = usSince(t0)
	for _, tc := range sf.Tests {
		if cancel.Load() {
			return r
		}
		doc, err := grammar.CompactJSON(tc.Data)
		if err != nil {
			continue
		}
		ids := tok.Encode(doc, false)
		m := g.NewMatcher()
		ok := true
		for i, id := range ids {
			if cancel.Load() {
				return r
			}
			s := time.Now()
			m.FillMask(mask)
			d := usSince(s)
			if tc.Valid {
				r.tbm = append(r.tbm, d)
			}
			allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
			acc := m.Accept(id)
			if allowed != acc {
				panic(fmt.Sprintf("mask says %v but Accept says %v for token %d at %d of %q", allowed, acc, id, i, doc))
			}
			if !acc {
				ok = false
				if tc.Valid {
					r.detail = fmt.Sprintf("rejected %q after %q", tok.TokenBytes(id), prefixOf(tok, ids[:i]))
				}
				break
			}
		}
		if ok {
			s := time.Now()
			m.FillMask(mask)
			if tc.Valid {
				r.tbm = append(r.tbm, usSince(s))
			}
			endOK := len(eos) > 0 && mask[eos[0]>>6]&(1<<(uint(eos[0])&63)) != 0
			if endOK != m.CanEnd() {
				panic("EOS mask bit disagrees with CanEnd")
			}
			ok = endOK
			if !ok && tc.Valid {
				r.detail = fmt.Sprintf("cannot end after %q", doc)
			}
		}
		switch {
		case tc.Valid && !ok:
			r.validErr++
		case !tc.Valid && ok:
			r.invalidErr++
			r.detail = fmt.Sprintf("accepted invalid %s", doc)
		}
	}
	return r
}

func prefixOf(tok *tokenizer.Tokenizer, ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = append(b, tok.TokenBytes(id)...)
	}
	if len(b) > 200 {
		b = b[len(b)-200:]
	}
	return string(b)
}

// report writes r's failure, if any, on w, prefixed by the engine's name (empty for ours):
// timeouts, crashes and invalidations when loud, compile errors and rejected valid instances
// only when verbose as well.
func (r *result) report(w io.Writer, engine, name string, loud, verbose bool) {
	var kind, detail string
	switch {
	case r.timeout:
		kind = "TIMEOUT"
	case r.crash != "":
		kind, detail = "CRASH", r.crash
	case r.compileErr != "":
		kind, detail, loud = "compile", r.compileErr, loud && verbose
	case r.invalidErr > 0:
		kind, detail = "INVALIDATION", r.detail
	case r.validErr > 0:
		kind, detail, loud = "validation", r.detail, loud && verbose
	}
	if kind == "" || !loud {
		return
	}
	if engine != "" {
		kind = engine + " " + kind
	}
	if detail != "" {
		fmt.Fprintf(w, "%s %s: %s\n", kind, name, detail)
	} else {
		fmt.Fprintf(w, "%s %s\n", kind, name)
	}
}

// writeHeapProfile writes the heap profile (allocations since the start included).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
