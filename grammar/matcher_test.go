package grammar

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func TestRegexGrammar(t *testing.T) {
	e := env(t, "llama3")
	cases := []struct {
		re      string
		valid   []string
		invalid []string
	}{
		{`[a-c]+x?`, []string{"abc", "ax", "c"}, []string{"", "x", "abd"}},
		{`(foo|bar)\d{2,3}`, []string{"foo12", "bar123"}, []string{"foo1", "baz12", "foo1234"}},
		{`\w+@\w+\.com`, []string{"me@site.com"}, []string{"me@site.org"}},
		{`[^"]*`, []string{"", "héllo wörld"}, []string{`a"b`}},
		{`(yes|no)`, []string{"yes", "no"}, []string{"yesno"}},
		{`.{3}`, []string{"abc", "日本語"}, []string{"ab", "a\nb"}},
	}
	for _, c := range cases {
		g, err := e.comp.Regex(c.re)
		if err != nil {
			t.Fatalf("%s: %v", c.re, err)
		}
		for _, s := range c.valid {
			if !acceptBytes(g, s) || (s != "" && !acceptDoc(t, e, g, s)) {
				t.Errorf("regex %s: %q rejected", c.re, s)
			}
		}
		for _, s := range c.invalid {
			if acceptBytes(g, s) || (s != "" && acceptDoc(t, e, g, s)) {
				t.Errorf("regex %s: %q accepted", c.re, s)
			}
		}
	}
	for _, bad := range []string{`(a`, `a)`, `\1`, `(?i)a`, `a{3,1}`, `\p{L}`, `(?<=a)b`} {
		if _, err := e.comp.Regex(bad); err == nil {
			t.Errorf("regex %q compiled", bad)
		}
	}
}

func TestMatcherRollbackForcedEOS(t *testing.T) {
	for _, name := range []string{"llama3", "qwen3"} {
		e := env(t, name)
		g, err := e.comp.JSONSchema(`{"type":"object","properties":{"answer":{"type":"boolean"}},"required":["answer"],"additionalProperties":false}`)
		if err != nil {
			t.Fatal(err)
		}
		m := g.NewMatcher()
		if fb := string(m.ForcedBytes()); fb != `{"answer":` {
			t.Fatalf("%s: forced bytes at start = %q", name, fb)
		}
		if m.CanEnd() || m.Done() {
			t.Fatalf("%s: empty document may end", name)
		}
		ids := e.tok.Encode(`{"answer":true}`, false)
		mask := make([]uint64, (e.tok.VocabSize()+63)/64)
		m.FillMask(mask)
		if mask[e.eos>>6]&(1<<(uint(e.eos)&63)) != 0 {
			t.Fatalf("%s: EOS allowed at start", name)
		}
		if m.Accept(e.eos) {
			t.Fatalf("%s: EOS accepted at start", name)
		}
		for i := int32(0); i < int32(e.tok.VocabSize()); i++ {
			if e.tok.IsSpecial(i) && mask[i>>6]&(1<<(uint(i)&63)) != 0 {
				t.Fatalf("%s: special token %d allowed", name, i)
			}
		}
		for _, id := range ids {
			if !m.Accept(id) {
				t.Fatalf("%s: token %q rejected", name, e.tok.TokenBytes(id))
			}
		}
		if !m.CanEnd() || !m.Done() {
			t.Fatalf("%s: complete document cannot end (CanEnd %v Done %v)", name, m.CanEnd(), m.Done())
		}
		m.Rollback(1)
		if m.CanEnd() {
			t.Fatalf("%s: rollback did not undo the last token", name)
		}
		if fb := string(m.ForcedBytes()); !strings.HasSuffix(fb, "}") && fb != "" {
			t.Fatalf("%s: unexpected forced bytes %q", name, fb)
		}
		if !m.Accept(ids[len(ids)-1]) {
			t.Fatalf("%s: re-accept after rollback failed", name)
		}
		if !m.Accept(e.eos) || !m.Done() {
			t.Fatalf("%s: EOS not accepted at end", name)
		}
		m.FillMask(mask)
		for _, w := range mask {
			if w != 0 {
				t.Fatalf("%s: tokens allowed after EOS", name)
			}
		}
		if m.Accept(ids[0]) {
			t.Fatalf("%s: token accepted after EOS", name)
		}
		m.Rollback(1)
		if m.Done() != true || !m.CanEnd() {
			t.Fatalf("%s: rollback of EOS failed", name)
		}
		m.Rollback(100)
		if m.CanEnd() || string(m.ForcedBytes()) != `{"answer":` {
			t.Fatalf("%s: rollback to start failed", name)
		}
		// A rejected token leaves the state unchanged.
		bad := e.tok.Encode(`[`, false)[0]
		if m.Accept(bad) || string(m.ForcedBytes()) != `{"answer":` {
			t.Fatalf("%s: rejected token changed state", name)
		}
	}
}

var propertySchemas = []string{
	`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false}`,
	`{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":4}`,
	`{"type":"object","properties":{"tags":{"type":"array","items":{"enum":["a","b","c"]}},"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`,
	`{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"c":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/t"}`,
	`{"type":"string","format":"date-time"}`,
	`{"type":"string","pattern":"^[a-z]{2,5}-[0-9]+$"}`,
	`{"anyOf":[{"type":"null"},{"type":"string","maxLength":3},{"type":"integer","exclusiveMinimum":-5,"maximum":5}]}`,
	`{"type":"object","additionalProperties":{"type":"integer","multipleOf":3}}`,
	`{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"ip":{"type":"string","format":"ipv4"},"mail":{"type":"string","format":"email"}},"required":["id","ip","mail"],"additionalProperties":false}`,
	`{"type":"number","minimum":-2.5,"exclusiveMaximum":7}`,
	`{"type":"object","properties":{"a":{"const":{"x":[1,null]}},"b":{"type":["string","null"],"minLength":2}},"required":["a","b"],"additionalProperties":false}`,
	`{"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"boolean"}],"items":{"type":"null"},"maxItems":3}`,
	`{"type":"object","patternProperties":{"^n_":{"type":"number"}},"additionalProperties":{"type":"boolean"},"maxProperties":100}`,
	// not, rewritten into the schema of what fails it
	`{"type":"object","properties":{"k":{"type":"string","not":{"enum":["a","b"]},"maxLength":2},"n":{"type":"integer","minimum":0,"maximum":9,"not":{"const":5}},"z":{"not":{"type":["object","array","string","number"]}},"y":{"type":"boolean"}},"required":["k","n"],"not":{"required":["y","z"]},"additionalProperties":false}`,
	`{"type":"array","items":{"not":{"anyOf":[{"type":"string","pattern":"[aeiou]"},{"type":"number","minimum":3}]}},"maxItems":4}`,
	// members in any order: exactly tracked, and (past exactKeySetProps) by the required set
	`{"type":"object","properties":{"a":false,"b":{"type":"integer"},"c":{"type":"boolean"},"d":{"enum":["x","y"]}},"required":["c"],"not":{"required":["b","d"]},"additionalProperties":false}`,
	`{"type":"object","properties":{"p0":{"type":"null"},"p1":{"type":"boolean"},"p2":{"type":"integer"},"p3":{},"p4":{},"p5":{},"p6":{},"p7":{},"r1":{"type":"integer"},"r2":{"type":"string","maxLength":3}},"required":["r2","r1"],"additionalProperties":false}`,
}

// refusedPropertySchemas are the propertySchemas (by index) the compiler
// refuses, each with a word its error must contain.
var refusedPropertySchemas = map[int]string{}

// expectRefusal checks the compile result of propertySchemas[i] (or a
// schema after them, which must compile) against refusedPropertySchemas:
// it reports whether the schema compiled, and fails the test when a
// listed refusal compiles or another schema is refused.
func expectRefusal(t *testing.T, i int, err error) bool {
	t.Helper()
	want, listed := refusedPropertySchemas[i]
	switch {
	case err == nil && listed:
		t.Fatalf("schema %d compiles now: drop it from refusedPropertySchemas", i)
	case err != nil && !listed:
		t.Fatalf("schema %d: %v", i, err)
	case err != nil && !strings.Contains(err.Error(), want):
		t.Fatalf("schema %d refused for another reason than %q: %v", i, want, err)
	}
	return err == nil
}

// TestRandomGenerationValidates samples random allowed tokens until EOS and
// checks every finished document against the schema with jsonschema/v6.
func TestRandomGenerationValidates(t *testing.T) {
	e := env(t, "llama3")
	rng := rand.New(rand.NewSource(7))
	words := (e.tok.VocabSize() + 63) / 64
	mask := make([]uint64, words)
	closers := make([]uint64, words) // tokens that can end strings/containers
	for i := 0; i < e.tok.VocabSize(); i++ {
		if b := e.tok.TokenBytes(int32(i)); len(b) > 0 && len(bytes.Trim(b, "\"}]")) == 0 {
			closers[i>>6] |= 1 << (uint(i) & 63)
		}
	}
	tmp := make([]uint64, words)
	for si, schema := range propertySchemas {
		g, err := e.comp.JSONSchema(schema)
		if !expectRefusal(t, si, err) {
			continue
		}
		sch := compileValidator(t, schema)
		finished := 0
		for run := 0; run < 12; run++ {
			m := g.NewMatcher()
			var out []byte
			for step := 0; step < 300; step++ {
				m.FillMask(mask)
				if m.CanEnd() && rng.Intn(2) == 0 {
					if !m.Accept(e.eos) {
						t.Fatalf("schema %d: EOS allowed but rejected", si)
					}
					break
				}
				src := mask
				if step > 10 && rng.Intn(4) != 0 {
					for w := range tmp {
						tmp[w] = mask[w] & closers[w]
					}
					if randomBit(rng, tmp) >= 0 {
						src = tmp
					}
				}
				pick := randomBit(rng, src)
				if pick < 0 {
					t.Fatalf("schema %d: dead end after %q", si, out)
				}
				if !m.Accept(pick) {
					t.Fatalf("schema %d: masked token %d %q rejected after %q", si, pick, e.tok.TokenBytes(pick), out)
				}
				if pick == e.eos {
					break
				}
				out = append(out, e.tok.TokenBytes(pick)...)
			}
			if !isTerminated(m) {
				if testing.Verbose() {
					t.Logf("schema %d: unfinished %q", si, out)
				}
				continue // ran out of steps; nothing to validate
			}
			finished++
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil || dec.More() {
				t.Fatalf("schema %d: output %q is not one JSON value: %v", si, out, err)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(out))
			if err := sch.Validate(inst); err != nil {
				t.Fatalf("schema %d: generated %s does not validate: %v", si, out, err)
			}
		}
		if finished == 0 {
			t.Errorf("schema %d: no run finished", si)
		}
	}
}

// randomBit returns a uniformly chosen set bit of m, or -1.
func randomBit(rng *rand.Rand, m []uint64) int32 {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	if n == 0 {
		return -1
	}
	k := rng.Intn(n)
	for i, w := range m {
		c := bits.OnesCount64(w)
		if k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			w &= w - 1
		}
		return int32(i*64 + bits.TrailingZeros64(w))
	}
	return -1
}

func isTerminated(m *Matcher) bool { return m.cur() < 0 }

func compileValidator(t testing.TB, schema string) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("urn:test", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("urn:test")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConcurrentMatchers(t *testing.T) {
	e := env(t, "llama3")
	g, err := e.comp.JSONSchema(propertySchemas[0])
	if err != nil {
		t.Fatal(err)
	}
	ids := e.tok.Encode(`{"name":"concurrency","age":42}`, false)
	done := make(chan bool)
	for w := 0; w < 4; w++ {
		go func() {
			mask := make([]uint64, (e.tok.VocabSize()+63)/64)
			ok := true
			for r := 0; r < 20 && ok; r++ {
				m := g.NewMatcher()
				for _, id := range ids {
					m.FillMask(mask)
					ok = ok && m.Accept(id)
				}
				ok = ok && m.CanEnd()
			}
			done <- ok
		}()
	}
	for w := 0; w < 4; w++ {
		if !<-done {
			t.Fatal("concurrent matcher rejected a valid document")
		}
	}
	g2, _ := e.comp.JSONSchema(propertySchemas[0])
	if g2 != g {
		t.Error("compiled grammar not cached")
	}
}

// TestCompileOnceWhileInFlight: concurrent requests for a key being compiled wait for that
// compile instead of building it again.
func TestCompileOnceWhileInFlight(t *testing.T) {
	e := env(t, "llama3")
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	var builds atomic.Int32
	release := make(chan struct{})
	want, err := c.JSONObject()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]*Grammar, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.cached(context.Background(), "test", func(context.Context) (*Grammar, error) {
				builds.Add(1)
				<-release
				return want, nil
			})
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d builds for one key, want 1", n)
	}
	for i, g := range got {
		if g != want {
			t.Fatalf("caller %d got a different grammar", i)
		}
	}
}

// The cache is bounded by the bytes its grammars hold, DFA and masks
// included, and by count; the most recent grammar always stays.
func TestCacheBoundedByBytes(t *testing.T) {
	e := env(t, "llama3")
	schema := func(i int) string {
		return fmt.Sprintf(`{"type":"object","properties":{"k%d":{"type":"string","maxLength":%d}},"required":["k%d"]}`, i, 5+i, i)
	}
	c := NewCompiler(e.tok, []int32{e.eos}, Options{})
	g0, err := c.JSONSchema(schema(0))
	if err != nil {
		t.Fatal(err)
	}
	before := g0.Bytes()
	m := g0.NewMatcher()
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	for _, b := range []byte(`{"k0":"ab`) {
		m.FillMask(mask)
		if !m.AcceptBytes([]byte{b}) {
			t.Fatalf("byte %q refused", b)
		}
	}
	if before <= 0 || g0.Bytes() <= before {
		t.Fatalf("Bytes %d after compile, %d after masks: want positive and growing", before, g0.Bytes())
	}
	// a budget of about two such grammars keeps two
	small := NewCompiler(e.tok, []int32{e.eos}, Options{CacheBytes: 2*before + before/2})
	var gs []*Grammar
	for i := range 4 {
		g, err := small.JSONSchema(schema(i))
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	if g, _ := small.JSONSchema(schema(3)); g != gs[3] {
		t.Error("newest grammar was evicted")
	}
	if g, _ := small.JSONSchema(schema(0)); g == gs[0] {
		t.Error("oldest grammar outlived a byte budget of two")
	}
	byCount := NewCompiler(e.tok, []int32{e.eos}, Options{CacheSize: 1})
	a, _ := byCount.JSONSchema(schema(0))
	byCount.JSONSchema(schema(1))
	if g, _ := byCount.JSONSchema(schema(0)); g == a {
		t.Error("CacheSize 1 kept two grammars")
	}
}
