package tokenizer

import (
	"testing"
)

func BenchmarkLoadQwen3(b *testing.B) {
	for b.Loop() {
		if _, err := Load(qwen3Dir); err != nil {
			b.Fatal(err)
		}
	}
}

// benchEncode encodes every fixture text once per iteration and reports MB/s and tokens/s.
func benchEncode(b *testing.B, name string, noCache bool) {
	f := loadFixture(b, name)
	tok, err := Load(dirOf(name))
	if err != nil {
		b.Fatal(err)
	}
	if noCache {
		tok.bpe.cache.slots = nil
	}
	var size, tokens int64
	for _, c := range f.Cases {
		size += int64(len(c.Text))
		tokens += int64(len(c.IDs))
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, c := range f.Cases {
			tok.Encode(c.Text, false)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkEncodeQwen3(b *testing.B)         { benchEncode(b, "qwen3", false) }
func BenchmarkEncodeLlama3(b *testing.B)        { benchEncode(b, "llama3", false) }
func BenchmarkEncodeQwen3NoCache(b *testing.B)  { benchEncode(b, "qwen3", true) }
func BenchmarkEncodeLlama3NoCache(b *testing.B) { benchEncode(b, "llama3", true) }

// BenchmarkIncrementalDecode streams every fixture's ids through a Decoder one id at a time.
func BenchmarkIncrementalDecode(b *testing.B) {
	f := loadFixture(b, "qwen3")
	tok := loadCached(b, dirOf("qwen3"))
	var n int64
	for _, c := range f.Cases {
		n += int64(len(c.IDs))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var one [1]int32
	for b.Loop() {
		for _, c := range f.Cases {
			d := tok.NewDecoder(true)
			for _, id := range c.IDs {
				one[0] = id
				_ = d.Add(one[:])
			}
			_ = d.Flush()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*int64(b.N)), "ns/token")
}

func BenchmarkDecode(b *testing.B) {
	f := loadFixture(b, "qwen3")
	tok := loadCached(b, dirOf("qwen3"))
	var n int64
	for _, c := range f.Cases {
		n += int64(len(c.IDs))
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, c := range f.Cases {
			_ = tok.Decode(c.IDs, false)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*int64(b.N)), "ns/token")
}
