package chardfa

import (
	"math/rand"
	"regexp"
	"strings"
	"testing"
)

// randomString draws up to 6 chars from alphabet.
func randomString(rng *rand.Rand, alphabet []string) string {
	var sb strings.Builder
	for range rng.Intn(7) {
		sb.WriteString(alphabet[rng.Intn(len(alphabet))])
	}
	return sb.String()
}

// TestRegexAgreesWithGoRegexp: on patterns whose meaning is the same in Go's
// RE2 syntax and ECMA-262, the DFA accepts exactly what Go's regexp
// matches, anchored and as a search.
func TestRegexAgreesWithGoRegexp(t *testing.T) {
	patterns := []string{`a+b*`, `(ab|c)?d{2,3}`, `[^a-c]x`, `^a.c$`, `[0-9]{2}-[a-z]+`, `x|yz|`, `(a|b)*abb`, `é+[ü-ž]`}
	alphabet := []string{"a", "b", "c", "d", "x", "y", "z", "-", "0", "7", "é", "ü", "ž", "\n"}
	rng := rand.New(rand.NewSource(5))
	for _, pat := range patterns {
		for _, search := range []bool{false, true} {
			d, err := Regex(pat, search)
			if err != nil {
				t.Fatalf("%s: %v", pat, err)
			}
			ref := regexp.MustCompile(`^(?:` + pat + `)$`)
			if search {
				ref = regexp.MustCompile(pat)
			}
			for range 400 {
				s := randomString(rng, alphabet)
				if d.Matches(s) != ref.MatchString(s) {
					t.Fatalf("%s (search %v): %q accepted=%v, Go regexp says %v", pat, search, s, d.Matches(s), ref.MatchString(s))
				}
			}
		}
	}
}

// TestCombinators: Intersect, Complement, Length, Exclude and Multiples
// accept what their definitions say, and Empty agrees.
func TestCombinators(t *testing.T) {
	a, err := Regex(`^[ab]+$`, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Regex(`b`, true)
	if err != nil {
		t.Fatal(err)
	}
	both, err := Intersect(a, b)
	if err != nil {
		t.Fatal(err)
	}
	notB := Complement(b)
	short := Length(1, 3)
	excl := Exclude([]string{"ab", "a", "ab"})
	alphabet := []string{"a", "b", "c", "é"}
	rng := rand.New(rand.NewSource(9))
	for range 2000 {
		s := randomString(rng, alphabet)
		n := len([]rune(s))
		if both.Matches(s) != (a.Matches(s) && b.Matches(s)) {
			t.Fatalf("Intersect on %q", s)
		}
		if notB.Matches(s) == b.Matches(s) {
			t.Fatalf("Complement on %q", s)
		}
		if short.Matches(s) != (n >= 1 && n <= 3) {
			t.Fatalf("Length(1,3) on %q", s)
		}
		if excl.Matches(s) != (s != "a" && s != "ab") {
			t.Fatalf("Exclude on %q", s)
		}
	}
	m7 := Multiples(7)
	for _, c := range []struct {
		s  string
		ok bool
	}{{"0", true}, {"14", true}, {"-21", true}, {"15", false}, {"", false}, {"-", false}, {"700000000000000000007", true}} {
		if m7.Matches(c.s) != c.ok {
			t.Errorf("Multiples(7) on %q: want %v", c.s, c.ok)
		}
	}
	if !Complement(Length(0, -1)).Empty() || Length(2, 5).Empty() {
		t.Error("Empty is wrong")
	}
	if _, err := Regex(`(?=a)`, false); err == nil || !strings.Contains(err.Error(), "lookahead") {
		t.Errorf("lookahead: err %v", err)
	}
}
