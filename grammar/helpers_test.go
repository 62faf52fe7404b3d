package grammar

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/tokenizer"
)

// Tokenizers and compilers are loaded once per test binary.
type tokEnv struct {
	tok  *tokenizer.Tokenizer
	eos  int32
	comp *Compiler
	flex *Compiler
}

var (
	envOnce sync.Once
	envs    map[string]*tokEnv
	envErr  error
)

func loadEnvs() {
	envs = map[string]*tokEnv{}
	for _, name := range []string{"llama3", "qwen3"} {
		tok, err := tokenizer.Load(filepath.Join("..", "testdata", "tokenizer-files", name))
		if err != nil {
			envErr = err
			return
		}
		e, ok := tok.EOS()
		if !ok {
			envErr = errNoEOS
			return
		}
		envs[name] = &tokEnv{tok: tok, eos: e,
			comp: NewCompiler(tok, []int32{e}, Options{}),
			flex: NewCompiler(tok, []int32{e}, Options{Whitespace: Flexible})}
	}
}

var errNoEOS = &Error{Reason: "tokenizer has no EOS"}

func env(t testing.TB, name string) *tokEnv {
	t.Helper()
	envOnce.Do(loadEnvs)
	if envErr != nil {
		t.Fatalf("load tokenizers: %v", envErr)
	}
	return envs[name]
}

// acceptDoc feeds doc's tokens through a new matcher, checking each token
// against the mask first; it reports whether the whole doc and EOS pass.
func acceptDoc(t testing.TB, e *tokEnv, g *Grammar, doc string) bool {
	t.Helper()
	m := g.NewMatcher()
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	for _, id := range e.tok.Encode(doc, false) {
		m.FillMask(mask)
		allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
		ok := m.Accept(id)
		if ok != allowed {
			t.Fatalf("mask bit %v but Accept %v for token %d (%q) in %q", allowed, ok, id, e.tok.TokenBytes(id), doc)
		}
		if !ok {
			return false
		}
	}
	m.FillMask(mask)
	end := mask[e.eos>>6]&(1<<(uint(e.eos)&63)) != 0
	if end != m.CanEnd() {
		t.Fatalf("EOS bit %v but CanEnd %v after %q", end, m.CanEnd(), doc)
	}
	if end && !m.Accept(e.eos) {
		t.Fatalf("EOS allowed by mask but not accepted after %q", doc)
	}
	return end
}

// acceptBytes runs raw bytes through the automaton (token-independent).
func acceptBytes(g *Grammar, doc string) bool {
	m := g.NewMatcher()
	if doc != "" && !m.AcceptBytes([]byte(doc)) {
		return false
	}
	return m.CanEnd()
}

// testTokenizers are the vocabularies the token-level sweeps run on: both
// in the full run, Llama-3 alone with -short.
func testTokenizers() []string {
	if testing.Short() {
		return []string{"llama3"}
	}
	return []string{"llama3", "qwen3"}
}
