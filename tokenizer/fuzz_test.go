package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEncode: Encode never panics, ids are in range, and for valid UTF-8 decoding the ids gives
// back the (normalized) text, for every byte-level tokenizer we ship fixtures for. The incremental
// decoder agrees with Decode.
func FuzzEncode(f *testing.F) {
	for _, s := range fixedTexts() {
		f.Add(s)
	}
	for _, s := range []string{"\xff\xfe", "a\xe2\x82", "<|im_start|>\xc0", "'S'ſ'Ll", "\u0301\u0301a\u0301"} {
		f.Add(s)
	}
	toks := []*Tokenizer{loadCached(f, qwen3Dir), loadCached(f, llama3Dir), loadCached(f, picoDir)}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			ids := tok.Encode(s, true)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range", id)
				}
			}
			ids = tok.Encode(s, false)
			dec := tok.Decode(ids, false)
			if utf8.ValidString(s) {
				// Added tokens are split out before normalization, so the normalizer sees the text
				// between them piece by piece.
				var want strings.Builder
				tok.rawTrie.split(s, func(seg string) { want.WriteString(tok.normalize(seg)) },
					func(id int32) { want.WriteString(tok.Token(id)) })
				if dec != want.String() {
					t.Fatalf("round trip %q -> %v -> %q, want %q", s, ids, dec, want.String())
				}
			} else if !utf8.ValidString(dec) {
				t.Fatalf("Decode gave invalid UTF-8 %q", dec)
			}
			d := tok.NewDecoder(false)
			var sb strings.Builder
			for i := 0; i < len(ids); i += 2 {
				sb.WriteString(d.Add(ids[i:min(i+2, len(ids))]))
			}
			sb.WriteString(d.Flush())
			if sb.String() != dec {
				t.Fatalf("incremental %q != Decode %q", sb.String(), dec)
			}
		}
	})
}

// FuzzDecode: any ids (valid or not) decode without panicking, to valid UTF-8, the same in one go
// and incrementally.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0x10, 0x27, 0x02, 0x00}, true)
	tok := loadCached(f, qwen3Dir)
	f.Fuzz(func(t *testing.T, raw []byte, skip bool) {
		var ids []int32
		for i := 0; i+3 <= len(raw); i += 3 {
			// Mostly in-range ids (including single-byte tokens), sometimes wild ones.
			id := int32(raw[i]) | int32(raw[i+1])<<8 | int32(raw[i+2]&0x3)<<16
			if raw[i+2]&0x80 != 0 {
				id = -id
			}
			ids = append(ids, id)
		}
		dec := tok.Decode(ids, skip)
		if !utf8.ValidString(dec) {
			t.Fatalf("invalid UTF-8 %q", dec)
		}
		d := tok.NewDecoder(skip)
		var sb strings.Builder
		for _, id := range ids {
			sb.WriteString(d.Add([]int32{id}))
		}
		sb.WriteString(d.Flush())
		if sb.String() != dec {
			t.Fatalf("incremental %q != Decode %q", sb.String(), dec)
		}
	})
}

// FuzzLoad: malformed tokenizer.json / tokenizer_config.json give an error, never a panic; what
// loads can encode and decode.
func FuzzLoad(f *testing.F) {
	pico, err := os.ReadFile(filepath.Join(picoDir, "tokenizer.json"))
	if err != nil {
		f.Fatal(err)
	}
	picoCfg, _ := os.ReadFile(filepath.Join(picoDir, "tokenizer_config.json"))
	small := `{"added_tokens":[{"id":3,"content":"<s>","special":true,"normalized":false}],
		"normalizer":{"type":"NFC"},
		"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":true,"use_regex":true},
		"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
			"special_tokens":{"<s>":{"id":"<s>","ids":[3],"tokens":["<s>"]}}},
		"decoder":{"type":"ByteLevel"},
		"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"Ġ":4,"Ġa":5},"merges":["a b",["Ġ","a"]],"ignore_merges":true}}`
	f.Add([]byte(small), []byte(`{"bos_token":{"content":"<s>"},"add_bos_token":true,"chat_template":[{"name":"default","template":"x"}]}`))
	f.Add([]byte(small), []byte(`{"model_max_length":1e30,"eos_token":null}`))
	f.Add([]byte(strings.Replace(small, `"a b"`, `"a\u0020b"`, 1)), []byte(``))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"\ud83d\ude00":0,"\ud800":1},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`), []byte(`{}`))
	f.Add([]byte(`{"model":{"vocab":{"a":-1},"merges":[]}}`), []byte(`[]`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":99999999999},"merges":["a"]}}`), []byte(`{"added_tokens_decoder":{"x":{}}}`))
	f.Add([]byte(`[1,2,{"a":`), []byte(`{`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","a","a"]]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"String":"a"},"behavior":"Contiguous","invert":true},{"type":"ByteLevel","use_regex":false}]},"decoder":{"type":"Sequence","decoders":[{"type":"ByteLevel"}]}}`), []byte(nil))
	// A truncated real file.
	f.Add(pico[:min(len(pico), 3000)], picoCfg)
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		if len(tj) > 1<<20 {
			return
		}
		tok, err := New(tj, cj)
		if err != nil {
			return
		}
		for _, s := range []string{"", "ab a b<s>", "héllo  wörld\n\n123 😀"} {
			ids := tok.Encode(s, true)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range (vocab %d)", id, tok.VocabSize())
				}
			}
			_ = tok.Decode(ids, true)
			d := tok.NewDecoder(false)
			d.Add(ids)
			d.Flush()
		}
		for id := int32(-1); id <= int32(tok.VocabSize()); id++ {
			tok.TokenBytes(id)
			tok.Token(id)
			tok.IsSpecial(id)
		}
		tok.BOS()
		tok.EOS()
		tok.SpecialTokenStrings()
	})
}
