package chardfa

import "testing"

// TestRegexWide: the wide reading contains what any common dialect matches (Python's Unicode
// \d \w \s, '.' matching '\r', '$' before a final newline), the narrow one only what every
// dialect matches, and a negated class swaps the two.
func TestRegexWide(t *testing.T) {
	for _, c := range []struct {
		pat, s       string
		narrow, wide bool
	}{
		{`^\d$`, "7", true, true},
		{`^\d$`, "\u0663", false, true}, // ARABIC-INDIC DIGIT THREE
		{`^\w+$`, "héllo", false, true},
		{`^\s$`, "\u00a0", false, true},
		{`^a.b$`, "a\rb", false, true},
		{`^a.b$`, "a\nb", false, false},
		{`^ab$`, "ab\n", false, true},
		{`^[^\d]$`, "\u0663", false, true},
		{`^[^\d]$`, "x", true, true},
		{`^\D$`, "\u0663", false, true},
		{`^\S$`, "\u00a0", false, true},
	} {
		n, err := Regex(c.pat, true)
		if err != nil {
			t.Fatal(err)
		}
		w, err := RegexWide(c.pat, true)
		if err != nil {
			t.Fatal(err)
		}
		if n.Matches(c.s) != c.narrow || w.Matches(c.s) != c.wide {
			t.Errorf("%q on %q: narrow %v wide %v, want %v %v", c.pat, c.s, n.Matches(c.s), w.Matches(c.s), c.narrow, c.wide)
		}
	}
}
