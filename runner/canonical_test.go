package runner

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/tokenizer"
)

// canonicalConstraint compiles spec over pico's vocabulary into a constraint with the
// tokenizer's encoder, canonical literals on or off.
func canonicalConstraint(t *testing.T, tok *tokenizer.Tokenizer, spec grammar.Spec, canonical bool) *constraint {
	t.Helper()
	gs := NewGrammars(grammar.NewCompiler(tok, nil, grammar.Options{}))
	gs.SetCanonicalLiterals(canonical)
	var wg sync.WaitGroup
	c := gs.start(context.Background(), &wg, spec)
	wg.Wait()
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	c.encode = func(text string) []int32 { return tok.Encode(text, false) }
	return c
}

// prefixTokens lists the tokens mask admits that spell n bytes or fewer: where n bytes are
// forced, the spellings of a prefix of them.
func prefixTokens(c *constraint, mask []uint64, n int) []int32 {
	var out []int32
	for i := range len(mask) * 64 {
		if mask[i>>6]&(1<<(uint(i)&63)) != 0 {
			if l := c.m.TokenLen(int32(i)); l > 0 && l <= n {
				out = append(out, int32(i))
			}
		}
	}
	return out
}

func loadPicoTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCanonicalLiteralMask: where a JSON schema forces the rest of a property name, the mask
// admits exactly the tokenizer's first token of it among the tokens that spell part of it (with
// canonical literals off, every split the vocabulary has); where nothing is forced the mask is
// the grammar's either way.
func TestCanonicalLiteralMask(t *testing.T) {
	tok := loadPicoTokenizer(t)
	spec := grammar.Spec{Kind: grammar.KindJSONSchema, Text: longNamesSchema}
	on, off := canonicalConstraint(t, tok, spec, true), canonicalConstraint(t, tok, spec, false)
	words := (tok.VocabSize() + 63) / 64
	for _, c := range []*constraint{on, off} {
		// Both names start with "n": the choice comes after it.
		if !c.m.AcceptBytes([]byte(`{"na`)) {
			t.Fatal(`{"na refused`)
		}
	}
	forced := string(on.m.ForcedBytes())
	if forced != `me_of_the_registered_team":"` {
		t.Fatalf("forced %q", forced)
	}
	want := tok.Encode(forced, false)[0]
	mOn, mOff := make([]uint64, words), make([]uint64, words)
	on.FillMask(mOn)
	off.FillMask(mOff)
	if got := prefixTokens(on, mOn, len(forced)); !slices.Equal(got, []int32{want}) {
		t.Errorf("canonical mask admits %v (%q), want only %d (%q)", got, tok.Decode(got, false), want, tok.Decode([]int32{want}, false))
	}
	all := prefixTokens(off, mOff, len(forced))
	if len(all) < 2 || !slices.Contains(all, want) {
		t.Errorf("grammar's mask admits %v, want several splits with %d among them", all, want)
	}
	// Where the value's free string starts nothing is forced: the masks agree.
	for _, c := range []*constraint{on, off} {
		if !c.m.AcceptBytes([]byte(forced)) || len(c.m.ForcedBytes()) != 0 {
			t.Fatal("value start")
		}
	}
	clear(mOn)
	clear(mOff)
	on.FillMask(mOn)
	off.FillMask(mOff)
	if !slices.Equal(mOn, mOff) {
		t.Error("masks differ where nothing is forced")
	}
}

// TestCanonicalLiteralDraftsFollowMasks: along a literal longer than what one step encodes,
// generating from the canonical masks (the one token each admits among the literal's
// prefixes) spells the literal, and the jump-forward drafts and Admits are exactly those
// tokens, while a split of the literal the tokenizer would not make is not admitted.
func TestCanonicalLiteralDraftsFollowMasks(t *testing.T) {
	tok := loadPicoTokenizer(t)
	lit := strings.Repeat("the quarterly customer satisfaction survey, ", 4) // 176 bytes
	c := canonicalConstraint(t, tok, grammar.Spec{Kind: grammar.KindRegex, Text: `"` + lit + `"(yes|no)`}, true)
	mask := make([]uint64, (tok.VocabSize()+63)/64)
	var walked []int32
	for len(c.m.ForcedBytes()) > 0 {
		n := len(c.m.ForcedBytes())
		clear(mask)
		c.FillMask(mask)
		got := prefixTokens(c, mask, n)
		if len(got) != 1 {
			t.Fatalf("after %q: mask admits %v among the forced prefixes", tok.Decode(walked, false), got)
		}
		if err := c.Accept(got[0]); err != nil {
			t.Fatal(err)
		}
		walked = append(walked, got[0])
	}
	if text := tok.Decode(walked, false); text != `"`+lit+`"` {
		t.Fatalf("walked %q", text)
	}
	c.m.Rollback(len(walked))
	if d := c.ForcedTokens(nil, 64); !slices.Equal(d, walked[:min(64, len(walked))]) {
		t.Errorf("drafts %v, masks' tokens %v", d, walked)
	}
	if n := c.Admits(walked); n != len(walked) {
		t.Errorf("Admits(masks' tokens) = %d of %d", n, len(walked))
	}
	// The first byte of the literal's second token alone is a split the tokenizer would not
	// make: refused where the grammar alone takes it.
	second := tok.Decode(walked[1:2], false)
	if len(second) < 2 {
		t.Fatalf("second token %q: pick another literal", second)
	}
	split := append([]int32{walked[0]}, tok.Encode(second[:1], false)...)
	if n := c.Admits(split); n != 1 {
		t.Errorf("Admits(%v, a split of %q) = %d, want 1", split, second, n)
	}
	off := canonicalConstraint(t, tok, grammar.Spec{Kind: grammar.KindRegex, Text: `"` + lit + `"(yes|no)`}, false)
	if n := off.Admits(split); n != 2 {
		t.Errorf("without canonical literals Admits(split) = %d, want 2", n)
	}
}

// TestCanonicalLiteralUnsettled: where the tokenizer's first token of a forced literal is not
// settled by what is encoded, or is not a token the grammar takes, the mask is the grammar's:
// a literal that ends inside a character (the grammar forces its first byte only), a run the
// vocabulary spells with one 64-byte token (the encoded prefix is cut inside it), and a literal
// that spells a special token (the tokenizer encodes it as the special, which no grammar emits).
func TestCanonicalLiteralUnsettled(t *testing.T) {
	tok := loadPicoTokenizer(t)
	cases := []struct {
		name string
		spec grammar.Spec
		pre  string // accepted before the mask
	}{
		{"mid-character", grammar.Spec{Kind: grammar.KindJSONSchema, Text: `{"enum":["é1","è2"]}`}, `"`},
		{"long token at the cut", grammar.Spec{Kind: grammar.KindRegex, Text: strings.Repeat("-", 100) + "(a|b)"}, ""},
		{"special token", grammar.Spec{Kind: grammar.KindRegex, Text: `x<\|im_end\|>y(a|b)`}, "x"},
	}
	for _, tc := range cases {
		on, off := canonicalConstraint(t, tok, tc.spec, true), canonicalConstraint(t, tok, tc.spec, false)
		for _, c := range []*constraint{on, off} {
			if !c.m.AcceptBytes([]byte(tc.pre)) {
				t.Fatalf("%s: %q refused", tc.name, tc.pre)
			}
		}
		if len(on.m.ForcedBytes()) == 0 {
			t.Fatalf("%s: nothing forced", tc.name)
		}
		mOn, mOff := make([]uint64, (tok.VocabSize()+63)/64), make([]uint64, (tok.VocabSize()+63)/64)
		on.FillMask(mOn)
		off.FillMask(mOff)
		if !slices.Equal(mOn, mOff) {
			t.Errorf("%s: forced %q: the canonical mask differs from the grammar's", tc.name, on.m.ForcedBytes())
		}
		if d := on.ForcedTokens(nil, 8); len(d) != 0 {
			t.Errorf("%s: drafts %v", tc.name, d)
		}
	}
}
