package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// gbnfGrammars are bounded (counted repetitions, two levels of nesting) so that a random walk
// at temperature 1 ends well inside max_tokens; each is checked by a recognizer written
// independently of the grammar engine.
var gbnfGrammars = []struct {
	file  string
	check func(text string) error
}{
	{"arithmetic.gbnf", checkArithmetic},
	{"sql.gbnf", checkSQL},
	{"json.gbnf", checkJSONObject},
}

// checkArithmetic parses text as an integer arithmetic expression (numbers, unary minus,
// parentheses, + - * /) by recursive descent, needing all of it.
func checkArithmetic(text string) error {
	pos := 0
	var expr func() error
	number := func() error {
		start := pos
		for pos < len(text) && text[pos] >= '0' && text[pos] <= '9' {
			pos++
		}
		if pos == start {
			return fmt.Errorf("a number expected at %d", pos)
		}
		return nil
	}
	term := func() error {
		switch {
		case pos < len(text) && text[pos] == '-':
			pos++
			return number()
		case pos < len(text) && text[pos] == '(':
			pos++
			if err := expr(); err != nil {
				return err
			}
			if pos >= len(text) || text[pos] != ')' {
				return fmt.Errorf("')' expected at %d", pos)
			}
			pos++
			return nil
		}
		return number()
	}
	expr = func() error {
		if err := term(); err != nil {
			return err
		}
		for pos < len(text) && strings.IndexByte("+-*/", text[pos]) >= 0 {
			pos++
			if err := term(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := expr(); err != nil {
		return err
	}
	if pos != len(text) {
		return fmt.Errorf("trailing text at %d", pos)
	}
	return nil
}

var sqlRE = func() *regexp.Regexp {
	ident := `[a-z_][a-z0-9_]*`
	value := `(?:-?[0-9]+(?:\.[0-9]+)?|'[^'\n]*')`
	cond := ident + ` (?:=|<>|<|>|<=|>=) ` + value
	return regexp.MustCompile(`^SELECT (?:\*|` + ident + `(?:, ` + ident + `)*) FROM ` + ident +
		`(?: WHERE ` + cond + `(?: (?:AND|OR) ` + cond + `)*)?(?: ORDER BY ` + ident + `(?: ASC| DESC)?)?(?: LIMIT [1-9][0-9]*)?;$`)
}()

func checkSQL(text string) error {
	if !sqlRE.MatchString(text) {
		return fmt.Errorf("not a statement of the SQL subset")
	}
	return nil
}

func checkJSONObject(text string) error {
	var obj map[string]any
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	return nil
}

func TestGBNFRecognizers(t *testing.T) {
	for _, c := range []struct {
		check func(string) error
		text  string
		ok    bool
	}{
		{checkArithmetic, "1+(2*-3)/4", true}, {checkArithmetic, "(1", false}, {checkArithmetic, "1+", false}, {checkArithmetic, "", false},
		{checkSQL, "SELECT a, b FROM t WHERE x <= 'q' OR y = -1.5 ORDER BY a DESC LIMIT 10;", true},
		{checkSQL, "SELECT * FROM t", false}, {checkSQL, "SELECT * FROM t LIMIT 0;", false},
		{checkJSONObject, `{"a":[1,"x"]}`, true}, {checkJSONObject, `[1]`, false}, {checkJSONObject, `{"a":}`, false},
	} {
		if err := c.check(c.text); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.text, err, c.ok)
		}
	}
}

// gbnfCall is one request of the GBNF matrix.
type gbnfCall struct {
	grammar int // index in gbnfGrammars
	chat    bool
	stream  bool
	seed    int
}

func (c gbnfCall) String() string {
	return fmt.Sprintf("grammar=%s chat=%v stream=%v seed=%d", gbnfGrammars[c.grammar].file, c.chat, c.stream, c.seed)
}

// body builds the request, rotating through the fields that carry a grammar: /generate's
// grammar and ebnf, the chat endpoint's guided_grammar and structured_outputs.grammar.
func (c gbnfCall) body(text string, seed int) (string, map[string]any) {
	if !c.chat {
		field := []string{"grammar", "ebnf"}[c.seed%2]
		sp := map[string]any{"temperature": 1, "seed": seed, "max_new_tokens": 400, field: text}
		return "/generate", map[string]any{"text": "Answer: ", "sampling_params": sp, "stream": c.stream}
	}
	body := map[string]any{"model": "pico", "temperature": 1, "seed": seed, "max_tokens": 400, "stream": c.stream,
		"messages": []map[string]string{{"role": "user", "content": "Answer."}}}
	if c.seed%2 == 0 {
		body["guided_grammar"] = text
	} else {
		body["structured_outputs"] = map[string]any{"grammar": text}
	}
	if c.stream {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	return "/v1/chat/completions", body
}

// TestGBNFOutput samples pico at temperature 1 under GBNF grammars (arithmetic, a small SQL
// subset, JSON) through /generate and /v1/chat/completions, streamed and not, over two seeds,
// with detokd and with --skip-detokenization, each with 1 and 3 tokenizer workers: every output
// must end by the grammar and be recognized.
func TestGBNFOutput(t *testing.T) {
	texts := make([]string, len(gbnfGrammars))
	for i, g := range gbnfGrammars {
		b, err := os.ReadFile("testdata/gbnf/" + g.file)
		if err != nil {
			t.Fatal(err)
		}
		texts[i] = string(b)
	}
	var calls []gbnfCall
	for g := range gbnfGrammars {
		for _, chat := range []bool{false, true} {
			for _, stream := range []bool{false, true} {
				for seed := range 2 {
					calls = append(calls, gbnfCall{g, chat, stream, seed})
				}
			}
		}
	}
	for _, m := range outputModes {
		t.Run(m.name, func(t *testing.T) {
			e := startEngine(t, engineOpts{workers: m.workers, skipDetok: m.skipDetok})
			concurrently(t, len(calls), func(i int) error {
				c := calls[i]
				path, body := c.body(texts[c.grammar], 1000*i+c.seed)
				text, finish, err := e.sendConstrained(path, body, c.chat, c.stream)
				if err != nil {
					return fmt.Errorf("%v: %w", c, err)
				}
				if finish != "stop" {
					return fmt.Errorf("%v: finish %q (text %q); a bounded grammar must end", c, finish, text)
				}
				t.Logf("%v: %q", c, text)
				if err := gbnfGrammars[c.grammar].check(text); err != nil {
					return fmt.Errorf("%v: output %q: %w", c, text, err)
				}
				return nil
			})
		})
	}
}

// TestGBNFMalformed: a malformed grammar is a 400 naming the field, the line and the column,
// on every field; a grammar over the size limit or accepting no text is a 400 with the reason;
// the engine goes on serving grammars.
func TestGBNFMalformed(t *testing.T) {
	e := startEngine(t, engineOpts{tokArgs: []string{"--grammar-max-gbnf-bytes", "2000"}})
	for _, c := range []struct {
		name, grammar, where string
	}{
		{"unclosed class", "root ::= num\nnum ::= [0-9+\n", "line 2 column"},
		{"undefined rule", "root ::= \"a\" thing\n", "line 1 column 14"},
		{"unterminated string", "# comment\nroot ::= \"abc\n", "line 2 column"},
		{"left recursion", "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"\n", "line 2 column"},
		{"over the size limit", "root ::= \"" + strings.Repeat("a", 2000) + "\"\n", "over the 2000-byte limit (--grammar-max-gbnf-bytes)"},
		{"no text accepted", "root ::= a\na ::= \"x\" a\n", "accepts no text"},
	} {
		for _, r := range []struct {
			path, field string
			body        map[string]any
		}{
			{"/generate", "grammar", map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 4, "grammar": c.grammar}}},
			{"/generate", "ebnf", map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 4, "ebnf": c.grammar}}},
			{"/v1/chat/completions", "guided_grammar", map[string]any{"model": "pico", "max_tokens": 4,
				"messages": []map[string]string{{"role": "user", "content": "x"}}, "guided_grammar": c.grammar}},
			{"/v1/completions", "structured_outputs.grammar", map[string]any{"model": "pico", "max_tokens": 4, "prompt": "x",
				"structured_outputs": map[string]any{"grammar": c.grammar}}},
		} {
			code, b := e.post(r.path, r.body)
			if code != http.StatusBadRequest || !strings.Contains(string(b), r.field) || !strings.Contains(string(b), c.where) {
				t.Errorf("%s via %s: %d %s, want a 400 naming %s and %q", c.name, r.field, code, b, r.field, c.where)
			}
		}
	}
	r := generate(t, e, map[string]any{"text": "x", "sampling_params": map[string]any{"max_new_tokens": 40, "grammar": `root ::= "yes" | "no"`}})
	if r.Text != "yes" && r.Text != "no" {
		t.Errorf("grammar yes|no after bad requests gave %q", r.Text)
	}
}

// TestGBNFAfterReasoning: with thinking on (Qwen3's template), the grammar applies after the
// reasoning block, which max_reasoning_chars bounds: the content is recognized, streamed and not.
func TestGBNFAfterReasoning(t *testing.T) {
	e := startEngine(t, engineOpts{model: qwen3ToolModel(t), skipDetok: true, rankTimeout: 10 * time.Second})
	text, err := os.ReadFile("testdata/gbnf/arithmetic.gbnf")
	if err != nil {
		t.Fatal(err)
	}
	for seed := 1; seed <= 2; seed++ {
		body := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Compute."}}, "temperature": 1,
			"seed": seed, "max_tokens": 200, "max_reasoning_chars": 40, "guided_grammar": string(text)}
		whole := e.chatWhole(t, body)
		streamed := e.chatStream(t, body)
		if !whole.same(streamed) {
			t.Fatalf("seed %d: streamed\n%v\nnon-streamed\n%v", seed, streamed, whole)
		}
		if whole.Reasoning == "" || whole.Finish != "stop" {
			t.Fatalf("seed %d: reasoning %q, finish %s", seed, whole.Reasoning, whole.Finish)
		}
		if err := checkArithmetic(whole.Content); err != nil {
			t.Fatalf("seed %d: content %q: %v", seed, whole.Content, err)
		}
	}
}
