package tokenizer

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/gguf"
)

// writeTokenizerGGUF converts the tokenizer in dir to a GGUF holding only tokenizer metadata.
func writeTokenizerGGUF(t *testing.T, dir string, vocabSize int, extra map[string]any) string {
	t.Helper()
	w := gguf.NewWriter()
	if err := w.Set("general.architecture", "qwen3"); err != nil {
		t.Fatal(err)
	}
	if err := SetGGUFMetadata(w, dir, vocabSize); err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "tok.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGGUFFixtures: a GGUF written from the Qwen3 and Llama-3 tokenizer files encodes and decodes
// every fixture case as Hugging Face does, and as the tokenizer.json path does.
func TestGGUFFixtures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		vocabSize int // the model's embedding rows, larger than the tokenizer's vocabulary
		pre       string
	}{{"qwen3", 151936, "qwen2"}, {"llama3", 128256, "llama-bpe"}} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTokenizerGGUF(t, dirOf(tc.name), tc.vocabSize, nil)
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if pre, _ := f.String("tokenizer.ggml.pre"); pre != tc.pre {
				t.Errorf("tokenizer.ggml.pre = %q, want %q", pre, tc.pre)
			}
			if toks, _ := f.Strings("tokenizer.ggml.tokens"); len(toks) != tc.vocabSize {
				t.Errorf("%d tokens written, want %d", len(toks), tc.vocabSize)
			}
			f.Close()
			g, err := LoadGGUF(path)
			if err != nil {
				t.Fatal(err)
			}
			hf := loadCached(t, dirOf(tc.name))
			fx := loadFixture(t, tc.name)
			if g.VocabSize() != fx.VocabSize || g.VocabSize() != hf.VocabSize() {
				t.Errorf("VocabSize %d, want %d", g.VocabSize(), fx.VocabSize)
			}
			if g.ChatTemplate() != hf.ChatTemplate() || g.ChatTemplate() == "" {
				t.Error("chat template differs from tokenizer_config.json's")
			}
			if gb, ok := g.BOS(); ok != hf.hasBOS || gb != hf.bos {
				t.Errorf("BOS %d %v, want %d %v", gb, ok, hf.bos, hf.hasBOS)
			}
			if ge, ok := g.EOS(); !ok || ge != hf.eos {
				t.Errorf("EOS %d %v, want %d", ge, ok, hf.eos)
			}
			var skipDiffer int
			for i, c := range fx.Cases {
				if ids := g.Encode(c.Text, false); !slices.Equal(ids, c.IDs) {
					k := firstDiff(ids, c.IDs)
					t.Errorf("case %d %.60q: ids differ at %d: got %v, want %v", i, c.Text, k,
						ids[k:min(k+8, len(ids))], c.IDs[k:min(k+8, len(c.IDs))])
				}
				if ids := g.Encode(c.Text, true); !slices.Equal(ids, c.IDsWithSpecial) {
					t.Errorf("case %d %.60q: ids with special differ", i, c.Text)
				}
				if d := g.Decode(c.IDs, false); d != c.Decoded {
					t.Errorf("case %d: Decode = %.80q, want %.80q", i, d, c.Decoded)
				}
				// An added token that Hugging Face calls non-special but is shaped like <|...|>
				// is a control token in GGUF (llama.cpp's converter decides so), and skipped.
				want := c.DecodedSkipSpecial
				kept := slices.DeleteFunc(slices.Clone(c.IDs), func(id int32) bool {
					return !hf.IsSpecial(id) && looksSpecial(hf.Token(id))
				})
				if len(kept) != len(c.IDs) {
					want = hf.Decode(kept, true)
					skipDiffer++
				}
				if d := g.Decode(c.IDs, true); d != want {
					t.Errorf("case %d: Decode(skip) = %.80q, want %.80q", i, d, want)
				}
			}
			for id := range int32(g.VocabSize()) {
				if g.Token(id) != hf.Token(id) || g.IsSpecial(id) != hf.IsSpecial(id) && !looksSpecial(hf.Token(id)) {
					t.Fatalf("token %d: %q special %v, want %q special %v", id, g.Token(id), g.IsSpecial(id), hf.Token(id), hf.IsSpecial(id))
				}
			}
			t.Logf("%d cases: ids, ids+special and decode equal; %d hold a <|...|> token HF does not call special", len(fx.Cases), skipDiffer)
		})
	}
}

func TestGGUFPico(t *testing.T) {
	path := writeTokenizerGGUF(t, picoDir, 8192, nil)
	g, err := LoadGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	hf := loadCached(t, picoDir)
	for _, s := range []string{"Hello, world! 123 <|im_start|>user\nhi<|im_end|>", "  tabs\tand\nnewlines  ", ""} {
		if a, b := g.Encode(s, true), hf.Encode(s, true); !slices.Equal(a, b) {
			t.Errorf("%q: %v, want %v", s, a, b)
		}
	}
}

func TestGGUFErrors(t *testing.T) {
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"tokenizer.ggml.model": "llama"}, `tokenizer.ggml.model "llama"`},
		{map[string]any{"tokenizer.ggml.pre": "default"}, `tokenizer.ggml.pre "default"`},
		{map[string]any{"tokenizer.ggml.pre": "qwen35"}, `"qwen35" is not supported`},
		{map[string]any{"tokenizer.ggml.token_type": []int32{1, 2}}, "token_type"},
		{map[string]any{"tokenizer.ggml.merges": []string{"Ġt h", "nospace"}}, `"nospace"`},
		{map[string]any{"tokenizer.ggml.eos_token_id": uint32(1 << 20)}, "eos_token_id"},
		{map[string]any{"tokenizer.ggml.tokens": "x"}, "want array[string]"},
	} {
		path := writeTokenizerGGUF(t, picoDir, 8192, tc.extra)
		_, err := LoadGGUF(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.extra, err, tc.want)
		}
	}
}

func TestLoadDetectsGGUF(t *testing.T) {
	path := writeTokenizerGGUF(t, picoDir, 8192, nil)
	tok, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != loadCached(t, picoDir).VocabSize() {
		t.Errorf("VocabSize %d", tok.VocabSize())
	}
}

// FuzzFromGGUF builds tokenizers from arbitrary token lists, token types, merges and special ids:
// FromGGUF must return an error or a tokenizer that encodes and decodes without panicking.
func FuzzFromGGUF(f *testing.F) {
	f.Add("a\x00b\x00ab\x00<|x|>", []byte{1, 1, 1, 3}, "a b", uint8(0), uint32(3), "ab<|x|>ba")
	f.Add("Ġ\x00t\x00Ġt", []byte{1, 1, 1}, "Ġ t", uint8(1), uint32(0), " t t")
	f.Add("x", []byte{9}, "x", uint8(2), uint32(7), "x")
	f.Fuzz(func(t *testing.T, toks string, types []byte, merges string, pre uint8, eos uint32, text string) {
		tokens := strings.Split(toks, "\x00")
		if len(tokens) > 4096 || len(merges) > 1<<16 {
			return
		}
		tt := make([]int32, len(tokens))
		for i := range tt {
			tt[i] = 1
			if i < len(types) {
				tt[i] = int32(types[i] % 8)
			}
		}
		w := gguf.NewWriter()
		pres := []string{"qwen2", "llama-bpe", "gpt-2", "default"}
		for _, err := range []error{w.Set("tokenizer.ggml.model", "gpt2"), w.Set("tokenizer.ggml.pre", pres[int(pre)%len(pres)]),
			w.Set("tokenizer.ggml.tokens", tokens), w.Set("tokenizer.ggml.token_type", tt),
			w.Set("tokenizer.ggml.merges", strings.Split(merges, "\n")), w.Set("tokenizer.ggml.eos_token_id", eos)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		g, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		tok, err := FromGGUF(g)
		if err != nil {
			return
		}
		ids := tok.Encode(text, true)
		_ = tok.Decode(ids, false)
		_ = tok.Decode(ids, true)
	})
}
