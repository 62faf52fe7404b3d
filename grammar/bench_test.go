package grammar

import (
	"context"
	"testing"
)

const benchSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}},"nested":{"type":"object","properties":{"k":{"type":"null"},"v":{"type":"boolean"},"f":{"type":"number"}}}},"required":["name","age"]}`

const benchDoc = `{"name":"Alice","age":30,"tags":["admin","user","a much longer tag with some words"],"nested":{"k":null,"v":true,"f":3.25}}`

// BenchmarkFillMask times one mask per token of benchDoc on a warm grammar.
func BenchmarkFillMask(b *testing.B) {
	for _, name := range []string{"llama3", "qwen3"} {
		b.Run(name, func(b *testing.B) {
			e := env(b, name)
			g, err := e.comp.JSONSchema(benchSchema)
			if err != nil {
				b.Fatal(err)
			}
			ids := e.tok.Encode(benchDoc, false)
			mask := make([]uint64, (e.tok.VocabSize()+63)/64)
			b.ResetTimer()
			n := 0
			for n < b.N {
				m := g.NewMatcher()
				for _, id := range ids {
					m.FillMask(mask)
					m.Accept(id)
					n++
					if n == b.N {
						break
					}
				}
			}
		})
	}
}

// BenchmarkCompile times a cold compile plus the first document's masks.
func BenchmarkCompile(b *testing.B) {
	e := env(b, "llama3")
	ids := e.tok.Encode(benchDoc, false)
	mask := make([]uint64, (e.tok.VocabSize()+63)/64)
	for i := 0; i < b.N; i++ {
		c := &Compiler{vt: e.comp.vt, opts: e.comp.opts}
		g, err := c.compileSchema(context.Background(), benchSchema, false)
		if err != nil {
			b.Fatal(err)
		}
		m := g.NewMatcher()
		m.FillMask(mask)
		if i == 0 {
			for _, id := range ids {
				m.FillMask(mask)
				m.Accept(id)
			}
		}
	}
}
