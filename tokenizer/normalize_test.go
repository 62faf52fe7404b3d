package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var normPool = []rune("aeiouAEOSsKkc\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u0328\u0345\u0344\u0340\u05b0\u05b8\u0651\u064e" +
	"\u1100\u1161\u11a8\u1175\uac00\uac01\ud7a3\u3131\u0958\u2126\u212b\u00c5\u1e9b\u1e63\u0dd9\u0dcf\u0dca\u0b47\u0b3e\u0b57" +
	"\u00bd\u00b2\ufb01\uff21\u3250\u321d\u1fb4\u03b1\u0391\u1f00\u0313\u0342\u09c7\u09be\u0f71\u0f72\u0f80\u0f73\u2460\u33ff" +
	"\ufdfa\u0cc6\u0cc2\u0cd5\u1025\u102e")

// randomNormText draws text from normPool and from code points whose normalization data Unicode
// 9.0 and 15.0 share.
func randomNormText(rng *rand.Rand) string {
	var sb strings.Builder
	for k := rng.Intn(12); k >= 0; k-- {
		if rng.Intn(5) == 0 {
			r := rune(rng.Intn(0x30000))
			if r >= 0xD800 && r <= 0xDFFF || isPost9(r) {
				r = 'x'
			}
			sb.WriteRune(r)
		} else {
			sb.WriteRune(normPool[rng.Intn(len(normPool))])
		}
	}
	return sb.String()
}

// TestNormalizeMatchesPython compares with Python's unicodedata (any version from 9.0 on agrees
// on these texts), when python3 is there.
func TestNormalizeMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	rng := rand.New(rand.NewSource(5))
	var texts []string
	for i := 0; i < 20000; i++ {
		texts = append(texts, randomNormText(rng))
	}
	texts = append(texts, "a"+strings.Repeat("\u0301", 40), "e"+strings.Repeat("\u0301\u0323", 20), "s\u0b3e\u0327\u0323\u0f72")
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	b, _ := json.Marshal(texts)
	os.WriteFile(in, b, 0o644)
	script := `import json,sys,unicodedata
t=json.load(open(sys.argv[1]))
json.dump([[unicodedata.normalize(f,s) for f in ('NFC','NFD','NFKC','NFKD')] for s in t], open(sys.argv[2],'w'))`
	if o, err := exec.Command(py, "-c", script, in, out).CombinedOutput(); err != nil {
		t.Skipf("python3: %v %s", err, o)
	}
	var res [][4]string
	ob, _ := os.ReadFile(out)
	if err := json.Unmarshal(ob, &res); err != nil || len(res) != len(texts) {
		t.Fatalf("python output: %v", err)
	}
	for i, s := range texts {
		for k, f := range []normForm{formNFC, formNFD, formNFKC, formNFKD} {
			if got := f.apply(s); got != res[i][k] {
				t.Fatalf("%s(%+q) = %+q, python %+q", f.name, s, got, res[i][k])
			}
		}
	}
}

func TestNormalizeNoStreamSafe(t *testing.T) {
	s := "a" + strings.Repeat("\u0301", 40)
	if got := formNFC.apply(s); got != "\u00e1"+strings.Repeat("\u0301", 39) {
		t.Errorf("NFC of a long combining run: %+q", got)
	}
	s = "e" + strings.Repeat("\u0301\u0323", 20)
	if got := formNFC.apply(s); got != "\u1eb9"+strings.Repeat("\u0323", 19)+strings.Repeat("\u0301", 20) {
		t.Errorf("NFC reorder of a long run: %+q", got)
	}
	// UAX #15 cases that x/text's own NFC gets wrong (Python and tokenizers agree with these).
	for in, want := range map[string]string{
		"s\u0b3e\u0327\u0323\u0f72": "s\u0b3e\u0f72\u0327\u0323",
		"\U00020077\u0302":          "\U00020077\u0302",
		"\u0b47\u0b3e":              "\u0b4b",
		"\u1100\u1161\u11a8":        "\uac01",
		"\u1e9b\u0323":              "\u1e9b\u0323",
	} {
		if got := formNFC.apply(in); got != want {
			t.Errorf("NFC(%+q) = %+q, want %+q", in, got, want)
		}
	}
	// Characters new since Unicode 9.0 are left alone, as tokenizers leaves them.
	for _, s := range []string{"\U0001FBF0", "\uAB69", "\u32FF", "\U00010785"} {
		if got := formNFKC.apply(s); got != s {
			t.Errorf("NFKC(%+q) = %+q, want it unchanged", s, got)
		}
	}
}
