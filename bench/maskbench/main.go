// Command maskbench runs the MaskBench JSON-schema constrained-decoding
// benchmark (guidance-ai/jsonschemabench maskbench data) against package
// grammar: compile time to first mask, per-token mask time, and whether
// valid instances pass and invalid ones are rejected.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
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

type result struct {
	compileErr string
	ttfm       time.Duration
	tbm        []time.Duration
	validErr   int // valid instance rejected
	invalidErr int // invalid instance accepted
	crash      string
	timeout    bool
	detail     string
}

func main() {
	data := flag.String("data", "", "MaskBench data/ directory (unpacked data.tar.gz)")
	tokDir := flag.String("tokenizer", "testdata/tokenizer-files/llama3", "tokenizer directory")
	limit := flag.Int("limit", 0, "run only the first N schemas (sorted by name); 0 = all")
	timeout := flag.Duration("timeout", 10*time.Second, "per-schema time limit")
	peer := flag.Bool("xgrammar-peer", false, "print how to run the XGrammar peer comparison and exit")
	flexible := flag.Bool("flexible", false, "compile with flexible whitespace")
	verbose := flag.Bool("v", false, "print each failing schema")
	slow := flag.Duration("slow", time.Second, "report schemas taking longer than this")
	match := flag.String("match", "", "only schemas whose file name contains this")
	flag.Parse()
	if *peer {
		fmt.Println(peerHelp)
		return
	}
	if *data == "" {
		fmt.Fprintln(os.Stderr, "usage: maskbench -data DIR [-tokenizer DIR] [-limit N] [-timeout 10s]")
		os.Exit(2)
	}
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
	opts := grammar.Options{}
	if *flexible {
		opts.Whitespace = grammar.Flexible
	}
	t0 := time.Now()
	comp := grammar.NewCompiler(tok, eos, opts)
	slog.Info("compiler ready", "vocab", tok.VocabSize(), "took", time.Since(t0))

	files, err := filepath.Glob(filepath.Join(*data, "*.json"))
	if err != nil || len(files) == 0 {
		slog.Error("no schema files", "dir", *data, "err", err)
		os.Exit(1)
	}
	sort.Strings(files)
	if *match != "" {
		var f2 []string
		for _, f := range files {
			if strings.Contains(filepath.Base(f), *match) {
				f2 = append(f2, f)
			}
		}
		files = f2
	}
	if *limit > 0 && *limit < len(files) {
		files = files[:*limit]
	}
	var (
		tbm, ttfm                                  []time.Duration
		pass, compileErrs, validErrs, invalidErrs  int
		crashes, timeouts, schemasWithValidFailure int
		compileReasons                             = map[string]int{}
	)
	start := time.Now()
	for i, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			slog.Error("read", "file", f, "err", err)
			os.Exit(1)
		}
		var sf schemaFile
		if err := json.Unmarshal(raw, &sf); err != nil {
			slog.Error("parse", "file", f, "err", err)
			os.Exit(1)
		}
		t1 := time.Now()
		r := runOne(comp, tok, eos, &sf, *timeout)
		if el := time.Since(t1); el > *slow {
			fmt.Fprintf(os.Stderr, "SLOW %s %.2fs\n", filepath.Base(f), el.Seconds())
		}
		name := filepath.Base(f)
		switch {
		case r.timeout:
			timeouts++
			fmt.Fprintf(os.Stderr, "TIMEOUT %s\n", name)
		case r.crash != "":
			crashes++
			fmt.Fprintf(os.Stderr, "CRASH %s: %s\n", name, r.crash)
		case r.compileErr != "":
			compileErrs++
			compileReasons[reasonKey(r.compileErr)]++
			if *verbose {
				fmt.Fprintf(os.Stderr, "compile %s: %s\n", name, r.compileErr)
			}
		default:
			ttfm = append(ttfm, r.ttfm)
			tbm = append(tbm, r.tbm...)
			validErrs += r.validErr
			invalidErrs += r.invalidErr
			if r.invalidErr > 0 {
				fmt.Fprintf(os.Stderr, "INVALIDATION %s: %s\n", name, r.detail)
			}
			if r.validErr > 0 {
				schemasWithValidFailure++
				if *verbose {
					fmt.Fprintf(os.Stderr, "validation %s: %s\n", name, r.detail)
				}
			}
			if r.validErr == 0 && r.invalidErr == 0 {
				pass++
			}
		}
		if (i+1)%100 == 0 || i+1 == len(files) {
			fmt.Fprintf(os.Stderr, "\r[%d/%d] pass %d compile-err %d valid-err %d invalid-err %d crash %d timeout %d (%.0fs)",
				i+1, len(files), pass, compileErrs, validErrs, invalidErrs, crashes, timeouts, time.Since(start).Seconds())
		}
	}
	fmt.Fprintln(os.Stderr)
	us := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3) }
	fmt.Printf("MaskBench (%d schemas, tokenizer %s, GOMAXPROCS=1)\n\n", len(files), *tokDir)
	fmt.Printf("| metric | llmserve grammar |\n|---|---:|\n")
	fmt.Printf("| TBM p50 (us) | %s |\n| TBM p99 (us) | %s |\n", us(pct(tbm, 0.50)), us(pct(tbm, 0.99)))
	fmt.Printf("| TTFM p50 (us) | %s |\n| TTFM p99 (us) | %s |\n", us(pct(ttfm, 0.50)), us(pct(ttfm, 0.99)))
	fmt.Printf("| schemas passing (of %d) | %d |\n", len(files), pass)
	fmt.Printf("| compile errors | %d |\n", compileErrs)
	fmt.Printf("| validation errors (valid instance rejected) | %d |\n", validErrs)
	fmt.Printf("| invalidation errors (invalid instance accepted) | %d |\n", invalidErrs)
	fmt.Printf("| crashes (recovered panics) | %d |\n", crashes)
	fmt.Printf("| timeouts (> %s) | %d |\n", *timeout, timeouts)
	fmt.Printf("| masks measured | %d |\n", len(tbm))
	type kv struct {
		k string
		n int
	}
	var reasons []kv
	for k, n := range compileReasons {
		reasons = append(reasons, kv{k, n})
	}
	sort.Slice(reasons, func(i, j int) bool { return reasons[i].n > reasons[j].n })
	fmt.Printf("\nTop compile-error reasons:\n")
	for i, r := range reasons {
		if i == 25 {
			break
		}
		fmt.Printf("%6d  %s\n", r.n, r.k)
	}
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

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(p*float64(len(s)-1))]
}

func runOne(comp *grammar.Compiler, tok *tokenizer.Tokenizer, eos []int32, sf *schemaFile, timeout time.Duration) (res result) {
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
		cancel.Store(true)
		return result{timeout: true}
	}
}

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
	r.ttfm = time.Since(t0)
	for _, tc := range sf.Tests {
		if cancel.Load() {
			return r
		}
		doc, err := canonical(tc.Data)
		if err != nil {
			continue
		}
		ids := tok.Encode(doc, false)
		m := g.NewMatcher()
		ok := true
		for i, id := range ids {
			s := time.Now()
			m.FillMask(mask)
			d := time.Since(s)
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
				r.tbm = append(r.tbm, time.Since(s))
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

// canonical re-serializes a JSON value compactly, keeping key order and
// number text, escaping only what JSON requires.
func canonical(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out []byte
	type frame struct {
		obj bool
		n   int
	}
	var stack []frame
	for {
		t, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		if d, ok := t.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			out = append(out, byte(d))
			if len(stack) > 0 {
				top := &stack[len(stack)-1]
				top.n++
			}
			continue
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.obj {
				if top.n%2 == 0 {
					if top.n > 0 {
						out = append(out, ',')
					}
				} else {
					out = append(out, ':')
				}
			} else if top.n > 0 {
				out = append(out, ',')
			}
		}
		switch x := t.(type) {
		case json.Delim:
			out = append(out, byte(x))
			stack = append(stack, frame{obj: x == '{'})
			continue
		case nil:
			out = append(out, "null"...)
		case bool:
			out = fmt.Appendf(out, "%v", x)
		case json.Number:
			out = append(out, x...)
		case string:
			out = appendString(out, x)
		}
		if len(stack) > 0 {
			stack[len(stack)-1].n++
		}
	}
	return string(out), nil
}

func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

const peerHelp = `XGrammar peer (WebAssembly build, Qwen3 vocabulary, one schema, needs node+npm and network):

  bash ../shared/peers/xgrammar/run.sh

It prints "vocab N, tokenizer-info+compiler X ms, compile Y ms, doc tokens T, mask us p50 .. p99 ..".
For the same document and schema here, run the grammar benchmarks with the Qwen3 tokenizer:

  go test ./grammar/ -run '^$' -bench 'FillMask|Compile' -benchtime 2000x

and compare the per-mask times measured in the same session (ratios, not absolutes).`
