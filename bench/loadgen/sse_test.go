package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseChunk(t *testing.T) {
	cases := []struct {
		name    string
		payload string
		check   func(t *testing.T, c *chunk)
	}{
		{"completion", `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a\"b","token_ids":[5,6,70000],"logprobs":null,"finish_reason":null}]}`,
			func(t *testing.T, c *chunk) {
				if !c.hasChoices || !slices.Equal(c.ids, []int32{5, 6, 70000}) || c.finish != nil || c.textBytes != 5 || c.hasUsage {
					t.Errorf("%+v", c)
				}
			}},
		{"final", `{"choices":[{"index":0,"text":"x","token_ids":[1],"finish_reason":"length"}]}`,
			func(t *testing.T, c *chunk) {
				if string(c.finish) != "length" || len(c.ids) != 1 {
					t.Errorf("%+v", c)
				}
			}},
		{"usage", `{"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":256,"total_tokens":268}}`,
			func(t *testing.T, c *chunk) {
				if c.hasChoices || !c.hasUsage || c.usage != (usage{12, 256}) || len(c.ids) != 0 {
					t.Errorf("%+v", c)
				}
			}},
		{"usage null", `{"choices":[{"index":0,"text":"","token_ids":[],"finish_reason":null}],"usage":null}`,
			func(t *testing.T, c *chunk) {
				if c.hasUsage || len(c.ids) != 0 || !c.hasChoices {
					t.Errorf("%+v", c)
				}
			}},
		{"chat spaced", `{"object": "chat.completion.chunk", "choices": [ {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "token_ids": [ 1 , 2 ], "finish_reason": "stop"} ]}`,
			func(t *testing.T, c *chunk) {
				if !c.hasChoices || !slices.Equal(c.ids, []int32{1, 2}) || string(c.finish) != "stop" || c.textBytes != 2 {
					t.Errorf("%+v", c)
				}
			}},
		{"done", ` [DONE]`, func(t *testing.T, c *chunk) {
			if !c.done {
				t.Errorf("%+v", c)
			}
		}},
		{"error", `{"error":{"message":"out of memory","type":"server_error","code":500}}`,
			func(t *testing.T, c *chunk) {
				if !strings.Contains(c.errMsg, "out of memory") || !strings.Contains(c.errMsg, "500") {
					t.Errorf("%+v", c)
				}
			}},
		{"vllm error", `{"object":"error","message":"bad things","type":"BadRequestError"}`,
			func(t *testing.T, c *chunk) {
				if c.errMsg != "bad things" {
					t.Errorf("%+v", c)
				}
			}},
		{"text that looks like a key", `{"choices":[{"text":"\"token_ids\":[9]","token_ids":[3],"finish_reason":null}]}`,
			func(t *testing.T, c *chunk) {
				if !slices.Equal(c.ids, []int32{3}) {
					t.Errorf("%+v", c)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := chunk{ids: []int32{99}} // stale ids must not leak into the next chunk
			if err := parseChunk([]byte(tc.payload), &c); err != nil {
				t.Fatal(err)
			}
			tc.check(t, &c)
		})
	}
}

func TestParseChunkRejects(t *testing.T) {
	for _, p := range []string{
		``, `[1]`, `{"choices":{}}`, `{"token_ids":[1,}`, `{"token_ids":[1`, `{"token_ids":5}`,
		`{"token_ids":[-1]}`, `{"token_ids":[99999999999]}`, `{"finish_reason":7}`, `{"finish_reason":"len`,
		`{"usage":{"prompt_tokens":1}}`, `{"usage":{"prompt_tokens":1,"completion_tokens":x}}`, `{"usage":{"prompt_tokens":1`,
	} {
		var c chunk
		if err := parseChunk([]byte(p), &c); err == nil {
			t.Errorf("parseChunk(%q) accepted: %+v", p, c)
		}
	}
}

func TestSSEReader(t *testing.T) {
	long := strings.Repeat("x", 10000) // longer than the reader's buffer
	in := ": comment\r\nevent: message\r\ndata: one\r\n\r\ndata:two\n\nid: 4\ndata: " + long + "\n\n"
	r := newSSEReader(strings.NewReader(in), 16)
	var got []string
	for {
		p, err := r.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(p))
	}
	if !slices.Equal(got, []string{"one", "two", long}) {
		t.Errorf("got %d payloads: %.40q", len(got), got)
	}
	r = newSSEReader(strings.NewReader("data: one\n\ndata: tw"), 16)
	if _, err := r.next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated line: err %v", err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	rng := rand.New(rand.NewPCG(1, 2))
	var vals []time.Duration
	for range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(5*time.Millisecond))
		vals = append(vals, d)
		h.add(d, 1)
	}
	h.add(3*time.Second, 0) // weight 0 records nothing
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		want := vals[int(q*float64(len(vals)))]
		got := h.quantile(q)
		if diff := float64(got-want) / float64(want); diff > 0.02 || diff < -0.02 {
			t.Errorf("q%.2f = %s, want %s (±2%%)", q, got, want)
		}
	}
	s := h.summary()
	if s.Count != 20000 || s.Max != ms(vals[len(vals)-1].Truncate(time.Microsecond)) || s.Mean < 4.5 || s.Mean > 5.5 {
		t.Errorf("summary %+v", s)
	}
	for us := uint64(0); us < 1<<20; us = us*5/4 + 1 {
		if b := bucketOf(us); bucketLow(b) > us || bucketLow(b+1) <= us {
			t.Fatalf("value %d in bucket %d [%d,%d)", us, b, bucketLow(b), bucketLow(b+1))
		}
	}
}

func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"text":"a","token_ids":[1,2],"logprobs":null,"finish_reason":null}]}`,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		`{"error":{"message":"x"}}`, `[DONE]`, `{"token_ids":[`, `{"finish_reason":"`, `{"usage":{`, `{"text":"\`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		c := chunk{}
		if err := parseChunk(p, &c); err != nil {
			return
		}
		if c.done && (len(c.ids) > 0 || c.hasUsage) {
			t.Fatalf("[DONE] with content: %+v", c)
		}
		for _, id := range c.ids {
			if id < 0 {
				t.Fatalf("negative id from %q", p)
			}
		}
	})
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata:x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newSSEReader(bytes.NewReader(in), 16)
		for range len(in) + 1 {
			p, err := r.next()
			if err != nil {
				return
			}
			if bytes.ContainsRune(p, '\n') {
				t.Fatalf("payload spans lines: %q", p)
			}
		}
		t.Fatalf("more payloads than input bytes")
	})
}

// BenchmarkParseChunk is the load generator's per-chunk cost for a typical one-token chunk.
func BenchmarkParseChunk(b *testing.B) {
	p := []byte(`{"id":"cmpl-1f","object":"text_completion","created":1764000000,"model":"Qwen/Qwen3-0.6B","choices":[{"index":0,"text":" t4711","token_ids":[4711],"logprobs":null,"finish_reason":null}]}`)
	var c chunk
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := parseChunk(p, &c); err != nil || len(c.ids) != 1 {
			b.Fatal(err)
		}
	}
}
