package tokenizer

import (
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

const (
	testdata   = "../testdata"
	qwen3Dir   = testdata + "/tokenizer-files/qwen3"
	llama3Dir  = testdata + "/tokenizer-files/llama3"
	picoDir    = "../models/pico"
	fixtureFmt = testdata + "/tokenizers/%s-expected.json"
)

type fixtureCase struct {
	Text               string  `json:"text"`
	IDs                []int32 `json:"ids"`
	IDsWithSpecial     []int32 `json:"ids_with_special"`
	Decoded            string  `json:"decoded"`
	DecodedSkipSpecial string  `json:"decoded_skip_special"`
}

type fixture struct {
	Tokenizer string        `json:"tokenizer"`
	VocabSize int           `json:"vocab_size"`
	Cases     []fixtureCase `json:"cases"`
}

var (
	loadOnce sync.Map // dir -> *onceTok
)

type onceTok struct {
	once sync.Once
	t    *Tokenizer
	err  error
}

// loadCached loads each tokenizer directory once per test binary.
func loadCached(tb testing.TB, dir string) *Tokenizer {
	tb.Helper()
	v, _ := loadOnce.LoadOrStore(dir, &onceTok{})
	o := v.(*onceTok)
	o.once.Do(func() { o.t, o.err = Load(dir) })
	if o.err != nil {
		tb.Fatalf("Load(%s): %v", dir, o.err)
	}
	return o.t
}

func loadFixture(tb testing.TB, name string) *fixture {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "tokenizers", name+"-expected.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		tb.Fatal(err)
	}
	if len(f.Cases) == 0 {
		tb.Fatalf("%s: no cases", name)
	}
	return &f
}

func dirOf(name string) string {
	return filepath.Join(testdata, "tokenizer-files", name)
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestFixtures(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, name)
			tok := loadCached(t, dirOf(name))
			if got := tok.VocabSize(); got != f.VocabSize {
				t.Errorf("VocabSize = %d, want %d", got, f.VocabSize)
			}
			var okIDs, okSpecial, okDec, okSkip int
			for i, c := range f.Cases {
				ids := tok.Encode(c.Text, false)
				if slices.Equal(ids, c.IDs) {
					okIDs++
				} else {
					k := firstDiff(ids, c.IDs)
					t.Errorf("case %d %.60q: ids differ at %d: got %v, want %v", i, c.Text, k,
						ids[k:min(k+8, len(ids))], c.IDs[k:min(k+8, len(c.IDs))])
				}
				if ws := tok.Encode(c.Text, true); slices.Equal(ws, c.IDsWithSpecial) {
					okSpecial++
				} else {
					t.Errorf("case %d %.60q: ids with special: got %v..., want %v...", i, c.Text,
						ws[:min(5, len(ws))], c.IDsWithSpecial[:min(5, len(c.IDsWithSpecial))])
				}
				if d := tok.Decode(c.IDs, false); d == c.Decoded {
					okDec++
				} else {
					t.Errorf("case %d: Decode = %.80q, want %.80q", i, d, c.Decoded)
				}
				if d := tok.Decode(c.IDs, true); d == c.DecodedSkipSpecial {
					okSkip++
				} else {
					t.Errorf("case %d: Decode(skip) = %.80q, want %.80q", i, d, c.DecodedSkipSpecial)
				}
			}
			n := len(f.Cases)
			t.Logf("%s: ids %d/%d, ids+special %d/%d, decode %d/%d, decode skip %d/%d",
				name, okIDs, n, okSpecial, n, okDec, n, okSkip, n)
		})
	}
}

// decodeIncrementally feeds ids to a Decoder in the given batch sizes and checks each delta.
func decodeIncrementally(t *testing.T, tok *Tokenizer, ids []int32, skip bool, next func() int) string {
	t.Helper()
	d := tok.NewDecoder(skip)
	var sb strings.Builder
	for i := 0; i < len(ids); {
		n := min(next(), len(ids)-i)
		delta := d.Add(ids[i : i+n])
		if !utf8.ValidString(delta) {
			t.Fatalf("delta %q is not valid UTF-8", delta)
		}
		sb.WriteString(delta)
		i += n
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

func TestIncrementalDecoderFixtures(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, name)
			tok := loadCached(t, dirOf(name))
			for i, c := range f.Cases {
				for _, skip := range []bool{false, true} {
					want := tok.Decode(c.IDs, skip)
					if got := decodeIncrementally(t, tok, c.IDs, skip, func() int { return 1 }); got != want {
						t.Errorf("case %d skip=%v one at a time: %.80q, want %.80q", i, skip, got, want)
					}
					for r := 0; r < 3; r++ {
						if got := decodeIncrementally(t, tok, c.IDs, skip, func() int { return 1 + rng.Intn(7) }); got != want {
							t.Errorf("case %d skip=%v random batches: %.80q, want %.80q", i, skip, got, want)
						}
					}
				}
			}
		})
	}
}

// TestIncrementalDecoderSplitsCharacters decodes single-byte tokens that spell multi-byte
// characters, and ill-formed sequences, one id at a time.
func TestIncrementalDecoderSplitsCharacters(t *testing.T) {
	tok := loadCached(t, dirOf("qwen3"))
	byteIDs := func(b []byte) []int32 {
		var ids []int32
		for _, c := range b {
			ids = append(ids, tok.bpe.byteID[c])
		}
		return ids
	}
	for _, s := range []string{
		"héllo wörld 😀 中文",
		"\xe4\xb8",             // truncated 3-byte character at the end
		"a\xf0\x9f\x98b",       // truncated 4-byte character in the middle
		"\xed\xa0\x80x",        // surrogate
		"\xc0\xaf\xff\xfe",     // never-valid bytes
		"\xf4\x90\x80\x80",     // above U+10FFFF
		"x\xe2\x82",            // ends in a valid prefix
		"\xe2\x82\xac\xe2\x82", // complete then incomplete
	} {
		ids := byteIDs([]byte(s))
		want := tok.Decode(ids, false)
		if want != lossyString([]byte(s)) {
			t.Errorf("Decode(%q) = %q", s, want)
		}
		d := tok.NewDecoder(false)
		var sb strings.Builder
		for _, id := range ids {
			delta := d.Add([]int32{id})
			if !utf8.ValidString(delta) {
				t.Errorf("%q: invalid delta %q", s, delta)
			}
			sb.WriteString(delta)
		}
		sb.WriteString(d.Flush())
		if sb.String() != want {
			t.Errorf("%q: incremental %q, want %q", s, sb.String(), want)
		}
	}
}

func TestLossyMatchesRust(t *testing.T) {
	// Expected values follow String::from_utf8_lossy / Python bytes.decode(errors="replace").
	for in, want := range map[string]string{
		"abc":                     "abc",
		"\xe4\xb8":                "\uFFFD",
		"\xe4\xb8x":               "\uFFFDx",
		"\xf0\x9f\x98":            "\uFFFD",
		"\xf0\x9f":                "\uFFFD",
		"\xed\xa0\x80":            "\uFFFD\uFFFD\uFFFD",
		"\xc0\xaf":                "\uFFFD\uFFFD",
		"\xe0\x80\xaf":            "\uFFFD\uFFFD\uFFFD",
		"\xf4\x90\x80\x80":        "\uFFFD\uFFFD\uFFFD\uFFFD",
		"\x80\x80":                "\uFFFD\uFFFD",
		"a\xf1\x80\x80\xe1\x80xb": "a\uFFFD\uFFFDxb",
		"\xef\xbf\xbd":            "\uFFFD",
	} {
		if got := lossyString([]byte(in)); got != want {
			t.Errorf("lossy(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTokenBytesAndDecodeAgree(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3"} {
		tok := loadCached(t, dirOf(name))
		for id := int32(0); id < int32(tok.VocabSize()); id++ {
			b := tok.TokenBytes(id)
			if d := tok.Decode([]int32{id}, false); d != lossyString(b) {
				t.Fatalf("%s id %d: Decode %q, TokenBytes %q", name, id, d, b)
			}
			if s := tok.Token(id); s != "" {
				if back, ok := tok.TokenID(s); !ok || back != id {
					t.Fatalf("%s: TokenID(Token(%d)=%q) = %d, %v", name, id, s, back, ok)
				}
			}
		}
	}
}

func TestAccessors(t *testing.T) {
	q := loadCached(t, dirOf("qwen3"))
	if _, ok := q.BOS(); ok {
		t.Error("qwen3 has no bos_token")
	}
	if id, ok := q.EOS(); !ok || q.Token(id) != "<|im_end|>" || id != 151645 {
		t.Errorf("qwen3 EOS = %d %v", id, ok)
	}
	if id, ok := q.TokenID("<|im_start|>"); !ok || id != 151644 || !q.IsSpecial(id) {
		t.Errorf("qwen3 <|im_start|> = %d %v special=%v", id, ok, q.IsSpecial(id))
	}
	if id, ok := q.TokenID("<think>"); !ok || q.IsSpecial(id) {
		t.Errorf("qwen3 <think> = %d %v: should be a non-special added token", id, ok)
	}
	if id, ok := q.TokenID("Ġthe"); !ok || string(q.TokenBytes(id)) != " the" {
		t.Errorf("qwen3 Ġthe = %d %v %q", id, ok, q.TokenBytes(id))
	}
	if q.ModelMaxLength() != 131072 {
		t.Errorf("qwen3 ModelMaxLength = %d", q.ModelMaxLength())
	}
	if !strings.Contains(q.ChatTemplate(), "<|im_start|>") {
		t.Error("qwen3 chat template missing")
	}
	sp := q.SpecialTokenStrings()
	if sp["eos_token"] != "<|im_end|>" || sp["pad_token"] != "<|endoftext|>" {
		t.Errorf("qwen3 special strings %v", sp)
	}
	if _, ok := sp["bos_token"]; ok {
		t.Errorf("qwen3 bos_token is null, got %q", sp["bos_token"])
	}

	l := loadCached(t, dirOf("llama3"))
	if id, ok := l.BOS(); !ok || id != 128000 {
		t.Errorf("llama3 BOS = %d %v", id, ok)
	}
	if id, ok := l.EOS(); !ok || id != 128001 {
		t.Errorf("llama3 EOS = %d %v", id, ok)
	}
	if l.ModelMaxLength() != math.MaxInt {
		t.Errorf("llama3 ModelMaxLength = %d, want MaxInt for 1e30", l.ModelMaxLength())
	}
	if l.VocabSize() != 128256 {
		t.Errorf("llama3 VocabSize = %d", l.VocabSize())
	}
	if l.TokenBytes(-1) != nil || l.TokenBytes(1<<30) != nil || l.Token(-5) != "" || l.IsSpecial(1<<30) {
		t.Error("out-of-range ids should give nothing")
	}
	if got := l.Decode([]int32{-1, 1 << 30, 9906}, false); got != "Hello" {
		t.Errorf("unknown ids should be skipped: %q", got)
	}
}

// TestPico loads the committed pico model's tokenizer and round-trips text through it.
func TestPico(t *testing.T) {
	tok := loadCached(t, picoDir)
	if tok.VocabSize() < 512 {
		t.Fatalf("pico VocabSize = %d", tok.VocabSize())
	}
	if id, ok := tok.EOS(); !ok || tok.Token(id) != "<|endoftext|>" {
		t.Errorf("pico EOS = %d %v", id, ok)
	}
	if _, ok := tok.BOS(); ok {
		t.Error("pico has no BOS")
	}
	if tok.ModelMaxLength() != 4096 || tok.ChatTemplate() == "" {
		t.Errorf("pico config: max %d template %q", tok.ModelMaxLength(), tok.ChatTemplate())
	}
	for _, s := range []string{
		"", "Hello, world!", "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
		"numbers 12345 and  spaces\t\ttabs\n\n", "unicode: héllo 中文 😀 ﬁ", "don't WE'LL it's",
	} {
		ids := tok.Encode(s, true)
		if s != "" && len(ids) == 0 {
			t.Errorf("Encode(%q) is empty", s)
		}
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		if got := tok.Decode(ids, false); got != s {
			t.Errorf("round trip %q -> %v -> %q", s, ids, got)
		}
	}
	ids := tok.Encode("<|im_start|>hi<|im_end|>", false)
	if ids[0] != 1 || ids[len(ids)-1] != 2 {
		t.Errorf("special tokens not split out: %v", ids)
	}
	if got := tok.Decode(ids, true); got != "hi" {
		t.Errorf("skip special: %q", got)
	}
}

func TestUnsupported(t *testing.T) {
	dir := t.TempDir()
	// A SentencePiece-only directory.
	sp := filepath.Join(dir, "sp")
	os.MkdirAll(sp, 0o755)
	os.WriteFile(filepath.Join(sp, "tokenizer.model"), []byte("\x0a\x00"), 0o644)
	os.WriteFile(filepath.Join(sp, "tokenizer_config.json"), []byte(`{}`), 0o644)
	_, err := Load(sp)
	if err == nil || !strings.Contains(err.Error(), "SentencePiece") || !strings.Contains(err.Error(), "supported") {
		t.Errorf("SentencePiece dir: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing dir: %v", err)
	}
	for name, js := range map[string]string{
		"wordpiece": `{"model":{"type":"WordPiece","vocab":{"a":0}},"pre_tokenizer":{"type":"BertPreTokenizer"},"decoder":{"type":"WordPiece"}}`,
		"unigram":   `{"model":{"type":"Unigram","vocab":[["a",0.0]]},"pre_tokenizer":{"type":"Metaspace"},"decoder":{"type":"Metaspace"}}`,
		"metaspace": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Metaspace"},"decoder":{"type":"Metaspace"}}`,
		"bytefallback": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"byte_fallback":true},
			"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`,
		"regex": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[
			{"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false},{"type":"ByteLevel","use_regex":false}]},"decoder":{"type":"ByteLevel"}}`,
		"normalizer": `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`,
	} {
		d := filepath.Join(dir, name)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "tokenizer.json"), []byte(js), 0o644)
		_, err := Load(d)
		if err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("%s: want a 'not supported' error, got %v", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// withPostProcessor writes a copy of the llama3 tokenizer with another post_processor and config.
func withPostProcessor(t *testing.T, post string, config map[string]any) *Tokenizer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(llama3Dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["post_processor"] = json.RawMessage(post)
	out, _ := json.Marshal(m)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644)
	cb, _ := json.Marshal(config)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cb, 0o644)
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestBOSRules: Meta's published Llama-3 tokenizer.json adds <|begin_of_text|> through a
// TemplateProcessing post-processor; add_bos_token / add_eos_token in tokenizer_config override.
func TestBOSRules(t *testing.T) {
	template := `{"type":"Sequence","processors":[{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true},
		{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<|begin_of_text|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
		"pair":[],"special_tokens":{"<|begin_of_text|>":{"id":"<|begin_of_text|>","ids":[128000],"tokens":["<|begin_of_text|>"]}}}]}`
	base := map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": map[string]any{"content": "<|end_of_text|>", "__type": "AddedToken"}}
	tok := withPostProcessor(t, template, base)
	if got := tok.Encode("Hello", true); !slices.Equal(got, []int32{128000, 9906}) {
		t.Errorf("TemplateProcessing: %v", got)
	}
	if got := tok.Encode("Hello", false); !slices.Equal(got, []int32{9906}) {
		t.Errorf("no special: %v", got)
	}
	if id, ok := tok.EOS(); !ok || id != 128001 {
		t.Errorf("AddedToken-object eos_token: %d %v", id, ok)
	}
	cfg := map[string]any{"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "add_bos_token": false, "add_eos_token": true}
	tok = withPostProcessor(t, template, cfg)
	if got := tok.Encode("Hello", true); !slices.Equal(got, []int32{9906, 128001}) {
		t.Errorf("add_bos_token=false add_eos_token=true: %v", got)
	}
	cfg = map[string]any{"bos_token": "<|begin_of_text|>", "add_bos_token": true}
	tok = withPostProcessor(t, `{"type":"ByteLevel"}`, cfg)
	if got := tok.Encode("Hello", true); !slices.Equal(got, []int32{128000, 9906}) {
		t.Errorf("add_bos_token=true: %v", got)
	}
	cfg = map[string]any{"chat_template": []map[string]string{{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}}, "model_max_length": 8192}
	tok = withPostProcessor(t, `null`, cfg)
	if tok.ChatTemplate() != "D" || tok.ModelMaxLength() != 8192 {
		t.Errorf("chat template list: %q, max %d", tok.ChatTemplate(), tok.ModelMaxLength())
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadCached(t, dirOf("qwen3"))
	f := loadFixture(t, "qwen3")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(f.Cases); i += 3 {
				if got := tok.Encode(f.Cases[i].Text, false); !slices.Equal(got, f.Cases[i].IDs) {
					t.Errorf("goroutine %d case %d differs", g, i)
				}
			}
		}(g)
	}
	wg.Wait()
}

// TestMergeHeapMatchesLinear: the heap merge used for long pieces gives what the linear scan gives.
func TestMergeHeapMatchesLinear(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	f := loadFixture(t, "qwen3")
	for _, name := range []string{"qwen3", "llama3"} {
		tok := loadCached(t, dirOf(name))
		for i := 0; i < 3000; i++ {
			c := f.Cases[rng.Intn(len(f.Cases))].Text
			if len(c) < 2 {
				continue
			}
			a := rng.Intn(len(c) - 1)
			piece := c[a:min(len(c), a+2+rng.Intn(longWord-2))]
			lin := tok.bpe.merge(nil, piece)
			syms := tok.bpe.initialSymbols(nil, piece)
			heap := syms[:tok.bpe.mergeHeap(syms)]
			if !slices.Equal(lin, heap) {
				t.Fatalf("%s %q: linear %v, heap %v", name, piece, lin, heap)
			}
		}
	}
}
