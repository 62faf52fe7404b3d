package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDifferentialHF compares Encode and Decode with the Hugging Face `tokenizers` library (its
// Node bindings, npm `tokenizers` 0.23.2, the version the fixtures were made with) on random text,
// for the fixture tokenizers and for variants that exercise the other supported features (GPT-2
// regex with add_prefix_space, split behaviours, added-token flags, normalized added tokens,
// TemplateProcessing). It needs node and the package, so it runs only when HF_TOKENIZERS_NODE_PATH
// names a node_modules directory holding `tokenizers` (e.g. after `npm install tokenizers@0.23.2`
// in /tmp/hf: HF_TOKENIZERS_NODE_PATH=/tmp/hf/node_modules). HF_DIFF_N sets the number of texts.
func TestDifferentialHF(t *testing.T) {
	nodePath := os.Getenv("HF_TOKENIZERS_NODE_PATH")
	if nodePath == "" {
		t.Skip("set HF_TOKENIZERS_NODE_PATH to run the differential test against HF tokenizers")
	}
	n := 3000
	if s := os.Getenv("HF_DIFF_N"); s != "" {
		json.Unmarshal([]byte(s), &n)
	}
	dir := t.TempDir()
	dirs := map[string]string{
		"qwen3":  dirOf("qwen3"),
		"llama3": dirOf("llama3"),
		"pico":   picoDir,
	}
	for name, edit := range variants() {
		d := filepath.Join(dir, name)
		writeVariant(t, d, edit)
		dirs[name] = d
	}
	seed := int64(7)
	if s := os.Getenv("HF_DIFF_SEED"); s != "" {
		json.Unmarshal([]byte(s), &seed)
	}
	rng := rand.New(rand.NewSource(seed))
	texts := fixedTexts()
	for len(texts) < n {
		texts = append(texts, randomText(rng))
	}
	req := map[string]any{"texts": texts}
	tj := map[string]string{}
	for name, d := range dirs {
		tj[name] = filepath.Join(d, "tokenizer.json")
	}
	req["tokenizers"] = tj
	// Random id lists for decoding, against the smallest vocabulary all tokenizers share.
	var idLists [][]int32
	for i := 0; i < 500; i++ {
		var ids []int32
		for k := rng.Intn(12); k >= 0; k-- {
			ids = append(ids, int32(rng.Intn(8192)))
		}
		idLists = append(idLists, ids)
	}
	req["idLists"] = idLists
	reqPath := filepath.Join(dir, "req.json")
	b, _ := json.Marshal(req)
	os.WriteFile(reqPath, b, 0o644)
	cmd := exec.Command("node", "testdata/hfdiff.cjs", reqPath)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var resp map[string]struct {
		Enc []struct {
			IDs        []int32 `json:"ids"`
			IDsSpecial []int32 `json:"idsSpecial"`
		} `json:"enc"`
		Dec [][2]string `json:"dec"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	for name, d := range dirs {
		tok, err := Load(d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := resp[name]
		fails := 0
		for i, text := range texts {
			got := tok.Encode(text, false)
			if !slices.Equal(got, r.Enc[i].IDs) {
				fails++
				if fails <= 5 {
					k := firstDiff(got, r.Enc[i].IDs)
					t.Errorf("%s: Encode(%q) differs at %d:\n go %v\n hf %v", name, text, k,
						got[k:min(len(got), k+6)], r.Enc[i].IDs[k:min(len(r.Enc[i].IDs), k+6)])
				}
				continue
			}
			if gs := tok.Encode(text, true); !slices.Equal(gs, r.Enc[i].IDsSpecial) {
				fails++
				t.Errorf("%s: Encode(%q, special) = %v, hf %v", name, text, gs, r.Enc[i].IDsSpecial)
			}
			if dec := tok.Decode(got, false); (name == "qwen3" || name == "llama3" || name == "pico") && dec != tok.normalizeForTest(text) {
				t.Errorf("%s: round trip %q -> %q", name, text, dec)
			}
		}
		for i, ids := range idLists {
			for k, skip := range []bool{false, true} {
				if got := tok.Decode(ids, skip); got != r.Dec[i][k] {
					fails++
					if fails <= 10 {
						t.Errorf("%s: Decode(%v, %v) = %q, hf %q", name, ids, skip, got, r.Dec[i][k])
					}
				}
			}
		}
		t.Logf("%s: %d texts, %d id lists, %d mismatches", name, len(texts), len(idLists), fails)
	}
}

// normalizeForTest applies the normalizer to the whole text.
func (t *Tokenizer) normalizeForTest(s string) string {
	return t.normalize(s)
}

func writeVariant(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(picoDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, _ := json.Marshal(m)
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{}`), 0o644)
}

func splitRegex(p, behavior string, invert bool) map[string]any {
	return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": p}, "behavior": behavior, "invert": invert}
}

func splitString(p, behavior string, invert bool) map[string]any {
	return map[string]any{"type": "Split", "pattern": map[string]any{"String": p}, "behavior": behavior, "invert": invert}
}

func byteLevel(prefix, regex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": false, "use_regex": regex}
}

func variants() map[string]func(m map[string]any) {
	return map[string]func(m map[string]any){
		"gpt2": func(m map[string]any) {
			m["pre_tokenizer"] = byteLevel(true, true)
			m["post_processor"] = map[string]any{
				"type": "TemplateProcessing",
				"single": []any{
					map[string]any{"SpecialToken": map[string]any{"id": "<|im_start|>", "type_id": 0}},
					map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
					map[string]any{"SpecialToken": map[string]any{"id": "<|im_end|>", "type_id": 0}},
				},
				"pair": []any{},
				"special_tokens": map[string]any{
					"<|im_start|>": map[string]any{"id": "<|im_start|>", "ids": []int{1}, "tokens": []string{"<|im_start|>"}},
					"<|im_end|>":   map[string]any{"id": "<|im_end|>", "ids": []int{2}, "tokens": []string{"<|im_end|>"}},
				},
			}
		},
		"gpt2noprefix": func(m map[string]any) {
			m["pre_tokenizer"] = byteLevel(false, true)
		},
		"splitmix": func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				splitString("ab", "MergedWithPrevious", false),
				splitString(" ", "MergedWithNext", false),
				splitRegex(patternLlama3, "Isolated", false),
				byteLevel(false, false),
			}}
		},
		"splitmix2": func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				splitString("e", "Contiguous", false),
				splitString("o", "Removed", false),
				splitString(" ", "Contiguous", true),
				splitString("x", "Removed", true),
				byteLevel(true, true),
			}}
		},
		"splitmix3": func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				splitString("a", "MergedWithNext", true),
				splitString("i", "MergedWithPrevious", true),
				splitRegex(patternQwen, "Contiguous", false),
				byteLevel(true, false),
			}}
		},
		"addedflags": func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFKC"}}}
			added := m["added_tokens"].([]any)
			id := 8192
			for _, a := range []map[string]any{
				{"content": "<mask>", "lstrip": true, "special": true},
				{"content": "hello", "single_word": true},
				{"content": "END", "rstrip": true, "special": true},
				{"content": "café", "normalized": true},
				{"content": "ﬁx", "normalized": true},
				{"content": "Ġzz"},
				{"content": "a b", "lstrip": true, "rstrip": true},
				{"content": "<|im", "special": true},
				{"content": "\u00e9\u00e9", "normalized": false, "special": true},
			} {
				a["id"] = id
				for _, k := range []string{"lstrip", "rstrip", "single_word", "normalized", "special"} {
					if _, ok := a[k]; !ok {
						a[k] = false
					}
				}
				added = append(added, a)
				id++
			}
			m["added_tokens"] = added
		},
	}
}

func fixedTexts() []string {
	return []string{
		"", " ", "  ", "\n", "'s", "'S", "x'ſ", "X'ſt", "'RE 'Ve 'LL 'lL 'D 'M 'T", "it's we'RE",
		"''s", "'", "a'", "'ll've", " 's", "\t's", "don'T", "\u00a0's",
		"123456789", "١٢٣٤٥", "x²³ ½ Ⅻ", "ⅫⅫⅫⅫ", "a1b22c333d4444",
		"hello  world", "hello\u00a0world", "a\u2028b", "x\u3000\u3000y", "\u200bzw", "\u0085nel", "\v\f",
		"e\u0301", "\u0301x", "ǅa", "ʰʰ", "\ufeffbom", "a \n b", "a \r\n\r\n b", "\n\n\t x", "   \n   \n",
		"<|im_start|>user\nhi<|im_end|>", "<|endoftext|><|endoftext|>", "<|im_end", "<think>\n</think>",
		"<|begin_of_text|>x<|eot_id|>", "<|reserved_special_token_250|>", "<mask> <mask>", "  <mask>",
		"hello", "hellohello", "say hello there", "_hello", "hello_", "ENDx", "END   x", "a b", "x a b  y",
		"café", "cafe\u0301", "ﬁx", "ﬁxﬁ", "Ġzz", "éé", "e\u0301e\u0301",
		strings.Repeat("a", 300), strings.Repeat(" ", 200) + "x", strings.Repeat("1", 100),
		strings.Repeat("ab", 150), strings.Repeat("😀", 60), strings.Repeat("中文", 80),
		"\U0001FAE8\U00031350\U0001C89A",
		"a" + strings.Repeat("\u0301", 40), "e" + strings.Repeat("\u0301\u0323", 20) + "x", strings.Repeat("\u0301", 35),
		"s\u0b3e\u0327\u0323\u0f72", "\U00020077\u0302", "\U0001FBF0\uAB69\u32FF\U00010785", "\u1100\u1161\u11a8",
	}
}

var diffPool = []string{
	"a", "b", "e", "i", "o", "x", "Z", "s", "S", "t", "T", "re", "RE", "ve", "ll", "LL", "d", "m", "ab",
	"hello", "END", "café", "ﬁ", "ﬁx", "zz", "Ġ", "the", "The", "THE",
	"'", "'", "'", "ſ", " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2028", "\u3000",
	"\u200b", "\u0085", "\v", "\u2009", "\u180e",
	"1", "2", "9", "12", "123", "4567", "١", "²", "½", "Ⅻ", "０",
	".", ",", "!", "?", "-", "_", "\"", "(", ")", "{", "}", "<", ">", "|", "/", "\\", "#", "@", "$",
	"é", "e\u0301", "\u0301", "ß", "Ω", "Ж", "中", "文", "한", "ア", "ʰ", "ǅ", "ا", "א", "ก", "\u0e31",
	"😀", "👩\u200d👩\u200d👧", "🇺🇸", "❤️", "\U0001FAE8", "\U00031350",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|begin_of_text|>",
	"<|eot_id|>", "<|reserved_special_token_7|>", "<|", "|>", "<mask>", "a b", "Ａ", "ｶ",
}

func randomText(rng *rand.Rand) string {
	var sb strings.Builder
	for k := rng.Intn(20); k >= 0; k-- {
		if rng.Intn(4) == 0 {
			// Any code point, to compare the Unicode tables (letters, numbers, spaces, marks).
			r := rune(rng.Intn(0x10FFFF))
			if rng.Intn(2) == 0 {
				r = rune(rng.Intn(0x3400))
			}
			if r >= 0xD800 && r <= 0xDFFF {
				r = 'x'
			}
			sb.WriteRune(r)
			continue
		}
		sb.WriteString(diffPool[rng.Intn(len(diffPool))])
		if rng.Intn(10) == 0 {
			sb.WriteString(strings.Repeat(diffPool[rng.Intn(len(diffPool))], 1+rng.Intn(6)))
		}
		if rng.Intn(200) == 0 {
			sb.WriteString(strings.Repeat(diffPool[rng.Intn(len(diffPool))], 1+rng.Intn(200)))
		}
	}
	return sb.String()
}
