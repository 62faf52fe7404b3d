package grammar

import (
	"math/rand"
	"testing"
)

func FuzzCompileSchema(f *testing.F) {
	for _, c := range schemaCases {
		f.Add(c.schema, c.valid[0])
	}
	f.Add(`{"$ref":"#"}`, `{}`)
	f.Add(`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`, `null`)
	e := env(f, "llama3")
	f.Fuzz(func(t *testing.T, schema, doc string) {
		g, err := e.comp.JSONSchema(schema)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("non-*Error error: %v", err)
			}
			return
		}
		m := g.NewMatcher()
		mask := make([]uint64, (e.tok.VocabSize()+63)/64)
		for _, id := range e.tok.Encode(doc, false) {
			m.FillMask(mask)
			if m.Accept(id) != (mask[id>>6]&(1<<(uint(id)&63)) != 0) {
				t.Fatal("mask and Accept disagree")
			}
		}
		m.ForcedBytes()
		m.Rollback(2)
		m.CanEnd()
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a+b*`, `[^a-z]{2,4}`, `(x|y|\d)+$`, `^\w+@\w+\.(com|org)$`, `.*`, `[\s\S]`, `a{2}`} {
		f.Add(s, "ab")
	}
	e := env(f, "qwen3")
	f.Fuzz(func(t *testing.T, pattern, input string) {
		g, err := e.comp.Regex(pattern)
		if err != nil {
			return
		}
		m := g.NewMatcher()
		m.AcceptBytes([]byte(input))
		mask := make([]uint64, (e.tok.VocabSize()+63)/64)
		m.FillMask(mask)
		// the mask and Accept agree on a spread of tokens, EOS is in the
		// mask exactly when the matcher may end, and forced bytes are
		// accepted
		for id := int32(0); int(id) < e.tok.VocabSize(); id += 997 {
			allowed := mask[id>>6]&(1<<(uint(id)&63)) != 0
			if m.Accept(id) != allowed {
				t.Fatalf("%q after %q: mask and Accept disagree on token %d", pattern, input, id)
			}
			if allowed {
				m.Rollback(1)
			}
		}
		if eos := mask[e.eos>>6]&(1<<(uint(e.eos)&63)) != 0; eos != m.CanEnd() {
			t.Fatalf("%q after %q: EOS in mask %v, CanEnd %v", pattern, input, eos, m.CanEnd())
		}
		if fb := m.ForcedBytes(); len(fb) > 0 && !m.AcceptBytes(fb) {
			t.Fatalf("%q after %q: forced bytes %q refused", pattern, input, fb)
		}
		m.Done()
	})
}

func FuzzMatcher(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	e := env(f, "llama3")
	g, err := e.comp.JSONSchema(propertySchemas[3])
	if err != nil {
		f.Fatal(err)
	}
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := g.NewMatcher()
		rng := rand.New(rand.NewSource(int64(len(ops))))
		for i, op := range ops {
			switch op % 4 {
			case 0, 1:
				m.FillMask(mask)
				if id := randomBit(rng, mask); id >= 0 && !m.Accept(id) {
					t.Fatal("allowed token rejected")
				}
				_ = i
			case 2:
				m.Rollback(int(op) % 3)
			case 3:
				m.Accept(int32(op) * 997)
				m.ForcedBytes()
			}
		}
	})
}
