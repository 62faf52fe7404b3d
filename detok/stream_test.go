package detok

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// fakeDecoder maps each id to a fixed piece of text. With lag > 0 it holds
// back the last `lag` pieces until more arrive (like a real incremental
// decoder waiting for the rest of a character), releasing them on Flush.
type fakeDecoder struct {
	vocab   []string
	lag     int
	pending []string
	adds    int
}

func (d *fakeDecoder) Add(ids []int32) string {
	d.adds++
	for _, id := range ids {
		d.pending = append(d.pending, d.vocab[id])
	}
	n := max(0, len(d.pending)-d.lag)
	out := strings.Join(d.pending[:n], "")
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return out
}

func (d *fakeDecoder) Flush() string {
	out := strings.Join(d.pending, "")
	d.pending = d.pending[:0]
	return out
}

// vocabOf returns a decoder whose vocabulary is the given pieces, id i
// being pieces[i].
func vocabOf(pieces ...string) *fakeDecoder { return &fakeDecoder{vocab: pieces} }

type push struct {
	ids      []int32
	finished bool
	text     string // expected text
	stopped  bool
}

func runPushes(t *testing.T, s *Stream, pushes []push) {
	t.Helper()
	for i, p := range pushes {
		text, stopped, _ := s.Push(p.ids, p.finished)
		if text != p.text || stopped != p.stopped {
			t.Fatalf("push %d (%v, finished=%v): got (%q, %v), want (%q, %v)", i, p.ids, p.finished, text, stopped, p.text, p.stopped)
		}
	}
}

func TestNoStopStringsPassThrough(t *testing.T) {
	dec := vocabOf("Hello", ",", " wor", "ld", "!")
	dec.lag = 1
	s := NewStream(dec, nil)
	runPushes(t, s, []push{
		{ids: []int32{0, 1}, text: "Hello"},
		{ids: []int32{2}, text: ","},
		{ids: nil, text: ""},
		{ids: []int32{3, 4}, text: " world"},
		{finished: true, text: "!"}, // held by the decoder, released by Flush
		{ids: []int32{0}, text: ""}, // after finish: nothing
	})
	if s.HeldBytes() != 0 || !s.Done() {
		t.Errorf("held %d done %v", s.HeldBytes(), s.Done())
	}
}

func TestStopStringAcrossDeltas(t *testing.T) {
	dec := vocabOf("Hi", " <", "/", "s", ">", " more")
	s := NewStream(dec, []string{"</s>"})
	runPushes(t, s, []push{
		{ids: []int32{0}, text: "Hi"},
		{ids: []int32{1}, text: " "}, // "<" could start "</s>"
		{ids: []int32{2}, text: ""},
		{ids: []int32{3}, text: ""},
		{ids: []int32{4, 5}, text: "", stopped: true},
		{ids: []int32{5}, text: "", stopped: true},
	})
	if stopped, m := s.Stopped(); !stopped || m != "</s>" {
		t.Errorf("Stopped() = %v, %q", stopped, m)
	}
	if dec.adds != 5 {
		t.Errorf("decoder called %d times; a stopped stream must not decode more", dec.adds)
	}
}

func TestEarliestStopStringWins(t *testing.T) {
	dec := vocabOf("answer", " STOP2", " tail", " STOP1")
	s := NewStream(dec, []string{"STOP1", "STOP2"})
	text, stopped, matched := s.Push([]int32{0, 1, 2, 3}, false)
	if text != "answer " || !stopped || matched != "STOP2" {
		t.Errorf("got (%q, %v, %q)", text, stopped, matched)
	}
}

// "bc" completes first, but "abcd" would start earlier: the stream waits to
// see which text wins, as a search of the whole text would.
func TestLongerStopStartingEarlierPreempts(t *testing.T) {
	for _, tc := range []struct {
		last    string
		text    string
		matched string
	}{
		{"d", "", "abcd"},
		{"x", "a", "bc"},
		{"", "a", "bc"}, // finish decides
	} {
		dec := vocabOf("ab", "c", tc.last)
		s := NewStream(dec, []string{"abcd", "bc"})
		var out strings.Builder
		for _, ids := range [][]int32{{0}, {1}} {
			text, stopped, _ := s.Push(ids, false)
			if stopped {
				t.Fatalf("last %q: stopped before the text decided", tc.last)
			}
			out.WriteString(text)
		}
		text, stopped, matched := s.Push([]int32{2}, tc.last == "")
		out.WriteString(text)
		if out.String() != tc.text || !stopped || matched != tc.matched {
			t.Errorf("last %q: got (%q, %v, %q), want (%q, true, %q)", tc.last, out.String(), stopped, matched, tc.text, tc.matched)
		}
	}
}

func TestPrefixHeldThenReleasedOnMismatch(t *testing.T) {
	s := NewStream(vocabOf("x<", "/", "p>", "<"), []string{"</s>"})
	runPushes(t, s, []push{
		{ids: []int32{0}, text: "x"},
		{ids: []int32{1}, text: ""},
		{ids: []int32{2}, text: "</p>"},
		{ids: []int32{3}, text: ""},
		{ids: []int32{1}, text: ""},
		{finished: true, text: "</"}, // held back text released at finish
	})
	if stopped, _ := s.Stopped(); stopped {
		t.Error("stopped without a match")
	}
}

func TestOverlappingPrefixes(t *testing.T) {
	// "aab" with stop "ab": the first "a" is released only once the second
	// shows it cannot begin the match.
	s := NewStream(vocabOf("a", "b"), []string{"ab"})
	runPushes(t, s, []push{
		{ids: []int32{0}, text: ""},
		{ids: []int32{0}, text: "a"},
		{ids: []int32{1}, text: "", stopped: true},
	})
	// Self-overlapping stop string: "aaab" with stop "aab".
	s = NewStream(vocabOf("a", "b"), []string{"aab"})
	runPushes(t, s, []push{
		{ids: []int32{0}, text: ""},
		{ids: []int32{0}, text: ""},
		{ids: []int32{0}, text: "a"},
		{ids: []int32{1}, text: "", stopped: true},
	})
}

func TestUnicodeStopStrings(t *testing.T) {
	s := NewStream(vocabOf("你好", "🛑", "世界", "ñan", "dú", "dx"), []string{"🛑世", "ñandú"})
	runPushes(t, s, []push{
		{ids: []int32{3}, text: ""},
		{ids: []int32{5}, text: "ñandx"},
		{ids: []int32{0, 1}, text: "你好"},
		{ids: []int32{2}, text: "", stopped: true},
	})
	s = NewStream(vocabOf("año ", "ñan", "dú", " fin"), []string{"ñandú"})
	runPushes(t, s, []push{
		{ids: []int32{0, 1}, text: "año "},
		{ids: []int32{2, 3}, text: "", stopped: true},
	})
}

func TestStopTextFromFlushIsTrimmed(t *testing.T) {
	dec := vocabOf("ok", "END", "tail")
	dec.lag = 2
	s := NewStream(dec, []string{"END"})
	text, _, _ := s.Push([]int32{0, 1, 2}, false)
	text2, stopped, matched := s.Push(nil, true)
	if text+text2 != "ok" || !stopped || matched != "END" {
		t.Errorf("got %q+%q stopped=%v matched=%q", text, text2, stopped, matched)
	}
}

func TestEmptyStopStringsIgnored(t *testing.T) {
	s := NewStream(vocabOf("abc"), []string{"", ""})
	if text, stopped, _ := s.Push([]int32{0}, false); text != "abc" || stopped {
		t.Errorf("got %q %v", text, stopped)
	}
}

// Long generation: the stream keeps only the undecided tail, whatever the
// sequence length.
func TestMemoryBounded(t *testing.T) {
	stops := []string{"<|im_end|>", "\n\nUser:", "<"}
	dec := vocabOf("<", "|im", "_", "end", "\n", "\nUser", "word", " ", "<|", "im_", "|")
	s := NewStream(dec, stops)
	rng := rand.New(rand.NewPCG(1, 2))
	var out strings.Builder
	var whole strings.Builder
	for i := range 100_000 {
		id := int32(1 + rng.IntN(len(dec.vocab)-1)) // never a bare "<"
		if i%1000 == 0 {
			id = 8 // "<|" then maybe more: a long undecided prefix
		}
		whole.WriteString(dec.vocab[id])
		text, stopped, _ := s.Push([]int32{id}, false)
		if stopped {
			break
		}
		out.WriteString(text)
		if s.HeldBytes() >= len("<|im_end|>") {
			t.Fatalf("push %d: %d bytes held", i, s.HeldBytes())
		}
	}
	text, _, _ := s.Push(nil, true)
	out.WriteString(text)
	if want := cutAtFirstStop(whole.String(), stops); out.String() != want.text {
		t.Errorf("output (%d bytes) differs from the whole-text reference (%d bytes)", out.Len(), len(want.text))
	}
}

type reference struct {
	text    string
	matched string
}

// cutAtFirstStop is the whole-text definition: cut at the earliest
// occurrence of any stop string (the shortest at equal starts).
func cutAtFirstStop(whole string, stops []string) reference {
	at, stop := -1, ""
	for _, st := range stops {
		if st == "" {
			continue
		}
		if i := strings.Index(whole, st); i >= 0 && (at < 0 || i < at || (i == at && len(st) < len(stop))) {
			at, stop = i, st
		}
	}
	if at < 0 {
		return reference{text: whole}
	}
	return reference{text: whole[:at], matched: stop}
}

// streamChunked splits text into tokens of 1-3 characters and pushes them
// in groups of 0-4 ids, checking the stream's invariants on the way.
func streamChunked(t *testing.T, text string, stops []string, seed uint64) reference {
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	dec := &fakeDecoder{lag: int(seed % 3)}
	var ids []int32
	for rest := text; rest != ""; {
		n := 0
		for range 1 + rng.IntN(3) {
			if n == len(rest) {
				break
			}
			_, size := utf8.DecodeRuneInString(rest[n:])
			n += size
		}
		ids = append(ids, int32(len(dec.vocab)))
		dec.vocab = append(dec.vocab, rest[:n])
		rest = rest[n:]
	}
	maxStop := 0
	for _, st := range stops {
		maxStop = max(maxStop, len(st))
	}
	s := NewStream(dec, stops)
	var out strings.Builder
	var matched string
	for len(ids) > 0 || !s.Done() {
		n := min(len(ids), rng.IntN(5))
		last := n == len(ids)
		text, stopped, m := s.Push(ids[:n], last)
		ids = ids[n:]
		out.WriteString(text)
		if stopped {
			matched = m
			if text, again, _ := s.Push(ids, true); text != "" || !again {
				t.Fatalf("push after stop returned %q, stopped=%v", text, again)
			}
			break
		}
		if s.HeldBytes() >= max(maxStop, 1) {
			t.Fatalf("held %d bytes with longest stop %d", s.HeldBytes(), maxStop)
		}
	}
	return reference{text: out.String(), matched: matched}
}

func checkAgainstReference(t *testing.T, text string, stops []string, seed uint64) {
	t.Helper()
	got, want := streamChunked(t, text, stops, seed), cutAtFirstStop(text, stops)
	if got != want {
		t.Fatalf("text %q stops %q seed %d: streamed %+v, whole-text reference %+v", text, stops, seed, got, want)
	}
}

// Many random texts over a tiny alphabet (so stop strings and their
// prefixes occur constantly), random stop sets and random chunkings.
func TestRandomChunkingsMatchWholeText(t *testing.T) {
	alphabet := []string{"a", "b", "c", "é", "😀"}
	rng := rand.New(rand.NewPCG(7, 7))
	word := func(maxLen int) string {
		var b strings.Builder
		for range 1 + rng.IntN(maxLen) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 3000 {
		text := word(40)
		stops := make([]string, rng.IntN(4))
		for j := range stops {
			stops[j] = word(4)
		}
		if len(stops) > 0 && rng.IntN(3) == 0 {
			// A stop string inside another: the inner one completes first,
			// yet the outer one may start earlier and must win; plant it.
			outer := word(5) + word(3)
			k := rng.IntN(len(outer))
			for k < len(outer) && !utf8.RuneStart(outer[k]) {
				k++
			}
			stops = append(stops, outer, outer[k:])
			p := rng.IntN(len(text) + 1)
			for p < len(text) && !utf8.RuneStart(text[p]) {
				p++
			}
			text = text[:p] + outer + text[p:]
		}
		checkAgainstReference(t, text, stops, uint64(i))
	}
}

func FuzzStreamMatchesWholeText(f *testing.F) {
	f.Add("Hello</s> world", "</s>", "", uint64(1))
	f.Add("aab", "ab", "b", uint64(2))
	f.Add("abcd", "abcd", "bc", uint64(3))
	f.Add("abcx", "abcd", "bc", uint64(4))
	f.Add("你好🛑世界", "🛑世", "界", uint64(5))
	f.Add("\xff\xfe<|im_end|>", "<|im_end|>", "\xfe", uint64(6))
	f.Add("no stops here", "", "", uint64(7))
	f.Fuzz(func(t *testing.T, text, stop1, stop2 string, seed uint64) {
		checkAgainstReference(t, text, []string{stop1, stop2}, seed)
	})
}

func TestTable(t *testing.T) {
	tab := NewTable()
	s, err := tab.Open("r1", vocabOf("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tab.Open("r1", vocabOf("x"), nil); err == nil {
		t.Error("second Open of r1 accepted")
	}
	if _, err := tab.Open("r2", vocabOf("y"), []string{"y"}); err != nil {
		t.Fatal(err)
	}
	if got, ok := tab.Get("r1"); !ok || got != s || tab.Len() != 2 {
		t.Errorf("Get(r1) = %p, %v; len %d", got, ok, tab.Len())
	}
	if !tab.Close("r1") || tab.Close("r1") {
		t.Error("Close should report an open stream once")
	}
	if _, ok := tab.Get("r1"); ok || tab.Len() != 1 {
		t.Errorf("r1 still present, len %d", tab.Len())
	}
}
