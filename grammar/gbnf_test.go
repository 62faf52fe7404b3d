package grammar

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func loadGBNF(t testing.TB, e *tokEnv, name string) *Grammar {
	t.Helper()
	text, err := os.ReadFile("testdata/gbnf/" + name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := e.comp.GBNF(string(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return g
}

func TestGBNFGrammars(t *testing.T) {
	e := env(t, "llama3")
	cases := []struct {
		file            string
		valid, rejected []string
	}{
		{"arithmetic.gbnf",
			[]string{"1", "12+3*(4-5)", "-(7)/2", "((1))", "2*-3"},
			[]string{"", "1+", "(1", "1)", "1 + 2", "a", "+1", "1**2"}},
		{"sql.gbnf",
			[]string{"SELECT * FROM users;", "SELECT id, name FROM users WHERE age >= 18 AND name = 'bob' ORDER BY name DESC LIMIT 10;",
				"SELECT a FROM t WHERE x <> -1.5;"},
			[]string{"SELECT * FROM users", "select * from users;", "SELECT * FROM Users;", "SELECT FROM t;",
				"SELECT * FROM t LIMIT 0;", "SELECT * FROM t LIMIT 12345;", "SELECT * FROM t WHERE a = 'x\ny';"}},
		{"json.gbnf",
			[]string{`{}`, `{"a":[1,-2.5e+3,true,null,{"b":"\u00e9\n"}],"c":"日本"}`},
			[]string{`[]`, `{"a":01}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{ "a":1}`, `{"a":1,}`}},
	}
	for _, c := range cases {
		g := loadGBNF(t, e, c.file)
		for _, d := range c.valid {
			if !acceptBytes(g, d) || !acceptDoc(t, e, g, d) {
				t.Errorf("%s: %q rejected", c.file, d)
			}
		}
		for _, d := range c.rejected {
			if acceptBytes(g, d) || d != "" && acceptDoc(t, e, g, d) {
				t.Errorf("%s: %q accepted", c.file, d)
			}
		}
	}
}

// TestGBNFJSONMasksEqualSchemaPath: JSON written in GBNF compiles into the
// same automaton machinery as {"type":"object"} (json_object), so every
// mask along documents must be the same bits.
func TestGBNFJSONMasksEqualSchemaPath(t *testing.T) {
	e := env(t, "llama3")
	gg := loadGBNF(t, e, "json.gbnf")
	gs, err := e.comp.JSONObject()
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{
		`{"name":"Alice","tags":["a","b\"c"],"n":-0.5e-7,"o":{"k":null,"v":[true,false,{}]},"s":"\u00e9😀\\/"}`,
		`{"a":{"b":{"c":[[],[1,2],{"d":"x"}]}},"long key with spaces":"value\t\r\n"}`,
	}
	mask1 := make([]uint64, gg.vt.words)
	mask2 := make([]uint64, gg.vt.words)
	checked := 0
	for _, doc := range docs {
		m1, m2 := gg.NewMatcher(), gs.NewMatcher()
		for k, id := range e.tok.Encode(doc, false) {
			m1.FillMask(mask1)
			m2.FillMask(mask2)
			if !slices.Equal(mask1, mask2) {
				t.Fatalf("token %d of %q: GBNF mask differs from the JSON Schema path's", k, doc)
			}
			checked++
			if !m1.Accept(id) || !m2.Accept(id) {
				t.Fatalf("token %d of %q rejected", k, doc)
			}
		}
		m1.FillMask(mask1)
		m2.FillMask(mask2)
		if !slices.Equal(mask1, mask2) || !m1.CanEnd() || !m2.CanEnd() {
			t.Fatalf("%q: final masks differ or cannot end", doc)
		}
	}
	t.Logf("%d masks equal", checked)
}

func TestGBNFErrors(t *testing.T) {
	e := env(t, "llama3")
	cases := []struct{ grammar, want string }{
		{"root ::= \"a", "line 1 column 10: unterminated string literal"},
		{"root ::= a\n", "line 1 column 10: undefined rule \"a\""},
		{"root ::= \"x\"\nroot ::= \"y\"", "line 2 column 1: rule \"root\" is already defined"},
		{"start ::= \"x\"", "no rule named root"},
		{"root ::= (\"a\" | \"b\"", "line 1 column 20: expected ) to close the group opened at line 1 column 10"},
		{"root ::= [a-", "line 1 column 10: unterminated character class"},
		{"root ::= [z-a]", "line 1 column 10: character range"},
		{"root ::= \"a\"{3,1}", "line 1 column 13: repetition {3,1}"},
		{"root ::= \"\\q\"", "line 1 column 11: unknown escape \\q"},
		{"root ::= x\nx ::= x \"a\" | \"b\"", "line 2 column 7: left recursion"},
		{"root ::= \"a\" )", "line 1 column 14: unexpected \")\""},
		{"root = \"a\"", "line 1 column 6: expected ::="},
		{"root ::= [^\\x00-\\U0010FFFF]", "accepts no text"},
		{"root ::= x\nx ::= \"a\" x", "accepts no text"},
	}
	for _, c := range cases {
		_, err := e.comp.GBNF(c.grammar)
		var ge *Error
		if !errors.As(err, &ge) || !strings.Contains(ge.Reason, c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.grammar, err, c.want)
		}
	}
}

func TestChoice(t *testing.T) {
	e := env(t, "llama3")
	g, err := e.comp.Choice([]string{"yes", "no", "yes please", "日本"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"yes", "no", "yes please", "日本"} {
		if !acceptDoc(t, e, g, d) {
			t.Errorf("%q rejected", d)
		}
	}
	for _, d := range []string{"", "ye", "yes pleas", "No", `"yes"`, "no "} {
		if acceptBytes(g, d) {
			t.Errorf("%q accepted", d)
		}
	}
	if _, err := e.comp.Choice(nil); err == nil {
		t.Error("empty choice compiled")
	}
}

func FuzzGBNF(f *testing.F) {
	for _, name := range []string{"arithmetic.gbnf", "sql.gbnf", "json.gbnf"} {
		text, err := os.ReadFile("testdata/gbnf/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(text), "1+2")
	}
	f.Add("root ::= [a-z]{2,5} (\",\" root)?", "ab,cd")
	f.Add("root ::= \"\\u00e9\" . [^\\]] # c", "éx!")
	e := env(f, "llama3")
	f.Fuzz(func(t *testing.T, grammar, input string) {
		g, err := e.comp.GBNF(grammar)
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("non-*Error error: %v", err)
			}
			return
		}
		mask := make([]uint64, g.vt.words)
		m := g.NewMatcher()
		m.FillMask(mask)
		if slices.Max(mask) == 0 {
			t.Fatalf("%q: compiles, but the first mask is empty", grammar)
		}
		witness, ok := shortestDocument(g)
		if w := g.NewMatcher(); !ok || (len(witness) > 0 && !w.AcceptBytes(witness)) || !w.CanEnd() {
			t.Fatalf("%q: compiles, but its shortest text %q is not accepted", grammar, witness)
		}
		m.AcceptBytes([]byte(input))
		m.ForcedBytes()
	})
}
