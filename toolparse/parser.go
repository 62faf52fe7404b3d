// Package toolparse reads a chat model's output text back into its parts: the reasoning block,
// the content, and the tool calls, in the syntax the model's chat template taught it. One parser
// per syntax, chosen by name from a registry (--tool-call-parser). Every parser is incremental:
// text may arrive in any chunks, one character at a time or whole, and the concatenated events
// and the calls are the same either way (streamed responses equal non-streamed ones).
package toolparse

import (
	"crypto/rand"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Reasoning syntaxes (--reasoning-parser): how a model's thinking block is marked.
const (
	// ReasoningQwen3: the output may open with <think> and the block ends at </think>; output
	// that does not open with <think> (enable_thinking false) is all content.
	ReasoningQwen3 = "qwen3"
	// ReasoningDeepSeekR1: the template opens the block in the prompt, so the output is
	// reasoning up to </think> (a leading <think> is dropped).
	ReasoningDeepSeekR1 = "deepseek_r1"
)

// Options configure one parser instance (one choice of one request).
type Options struct {
	// Reasoning is the reasoning syntax ("" when the output has no thinking block); parsers
	// whose syntax carries its own reasoning channel (harmony) ignore it.
	Reasoning string
	// Tools is set when the request offered tools: only then is the output read for calls.
	Tools bool
	// ParamTypes gives, per function and parameter, the JSON Schema type its schema declares;
	// syntaxes that write parameter values as bare text (qwen3_coder) use it to tell a string
	// from a number. Absent entries are decoded as JSON when they parse, else as strings.
	ParamTypes map[string]map[string]string
}

// Parser reads one output.
type Parser interface {
	// Feed reads more text and returns what it completed.
	Feed(text string) Events
	// Finish reads the end of the output (held-back text goes out as what it was) and returns
	// what that completed.
	Finish() Events
	// All is everything produced so far, as one Events.
	All() Events
	// Calls are the calls opened so far, their arguments as far as read.
	Calls() []Call
}

// Events is what a piece of output turned into.
type Events struct {
	// Reasoning and Content are the text of the thinking block and of the answer.
	Reasoning, Content []byte
	// Calls are new pieces of tool calls, in order.
	Calls []CallDelta
	// After is how many bytes at the end of Content came after calls (text after the last
	// call, or a call's head cut short).
	After int
}

// Empty reports whether the events hold nothing.
func (e *Events) Empty() bool {
	return len(e.Reasoning) == 0 && len(e.Content) == 0 && len(e.Calls) == 0
}

// CallDelta is new for one call: its header (the first time) and arguments text.
type CallDelta struct {
	// Index is the call's position among the output's calls.
	Index int
	// ID and Name are set on the call's first delta only.
	ID, Name string
	// Args is the next fragment of the arguments' JSON text.
	Args string
}

// Call is one call as parsed so far.
type Call struct {
	// ID is the call's fresh OpenAI-style id (call_...).
	ID string
	// Name is the function's name.
	Name string
	// Args is the arguments' JSON text.
	Args []byte
}

// Factory makes a parser with the given options.
type Factory func(Options) Parser

// registry maps a syntax name to its factory; regMu guards it (registration happens in init,
// lookups from any request).
var (
	regMu    sync.RWMutex
	registry = map[string]Factory{}
)

// Register adds a syntax; registering a name twice panics (a programming error).
func Register(name string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("toolparse: " + name + " registered twice")
	}
	registry[name] = f
}

// New returns a parser for the named syntax.
func New(name string, o Options) (Parser, error) {
	regMu.RLock()
	f, ok := registry[name]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown tool-call parser %q (have %s)", name, strings.Join(Names(), ", "))
	}
	return f(o), nil
}

// Names lists the registered syntaxes, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// maxSyntaxRun bounds the text held while looking for a call's name or end: the grammar makes
// both short, and an unconstrained output that never completes them is content, not a call
// (and is not rescanned forever). Searches look only at the first maxSyntaxRun bytes so the
// decision does not depend on how the text was chunked.
const maxSyntaxRun = 4096

// window is the part of s a bounded search looks at.
func window(s string) string {
	if len(s) > maxSyntaxRun {
		return s[:maxSyntaxRun]
	}
	return s
}

// sink accumulates what a parser produced: since the last Feed (ev) and in all (all).
type sink struct {
	ev, all Events
	calls   []Call
	anyText bool // some content was emitted
}

func (k *sink) content(s string) {
	if s == "" {
		return
	}
	for _, ev := range []*Events{&k.ev, &k.all} {
		ev.Content = append(ev.Content, s...)
		if len(ev.Calls) > 0 {
			ev.After += len(s)
		}
	}
	k.anyText = true
}

func (k *sink) reasoning(s string) {
	if s == "" {
		return
	}
	k.ev.Reasoning = append(k.ev.Reasoning, s...)
	k.all.Reasoning = append(k.all.Reasoning, s...)
}

// openCall starts a call with a known name and sends its header.
func (k *sink) openCall(name string) {
	id := NewCallID()
	k.calls = append(k.calls, Call{ID: id, Name: name})
	idx := len(k.calls) - 1
	for _, ev := range []*Events{&k.ev, &k.all} {
		ev.Calls = append(ev.Calls, CallDelta{Index: idx, ID: id, Name: name})
	}
}

// args appends to the open call's arguments.
func (k *sink) args(s string) {
	if s == "" || len(k.calls) == 0 {
		return
	}
	i := len(k.calls) - 1
	k.calls[i].Args = append(k.calls[i].Args, s...)
	for _, ev := range []*Events{&k.ev, &k.all} {
		if n := len(ev.Calls); n > 0 && ev.Calls[n-1].Index == i {
			ev.Calls[n-1].Args += s
			continue
		}
		ev.Calls = append(ev.Calls, CallDelta{Index: i, Args: s})
	}
}

func (k *sink) take() Events {
	ev := k.ev
	k.ev = Events{}
	return ev
}

// All implements Parser.
func (k *sink) All() Events { return k.all }

// Calls implements Parser.
func (k *sink) Calls() []Call { return slices.Clone(k.calls) }

// holdBack splits s into what can go out now and the longest suffix that is a proper prefix of
// one of the markers (it might complete into one).
func holdBack(s string, markers ...string) (string, string) {
	keep := 0
	for _, m := range markers {
		for k := min(len(s), len(m)-1); k > keep; k-- {
			if strings.HasSuffix(s, m[:k]) {
				keep = k
				break
			}
		}
	}
	return s[:len(s)-keep], s[len(s)-keep:]
}

// indexAny returns the first position of any marker in s, and which one (-1 when none).
func indexAny(s string, markers ...string) (int, int) {
	at, which := -1, -1
	for j, m := range markers {
		if i := strings.Index(s, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, j
		}
	}
	return at, which
}

// jsonStringEnd returns the index just past the JSON string s starts with, or -1 if it is
// not complete yet.
func jsonStringEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// NewCallID is an OpenAI-style tool call id.
func NewCallID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "call_" + string(b)
}

// Append adds the events that came after e to e.
func (e *Events) Append(o Events) {
	switch {
	case len(o.Calls) > 0:
		e.After = o.After
	case len(e.Calls) > 0:
		e.After += len(o.Content)
	}
	e.Reasoning = append(e.Reasoning, o.Reasoning...)
	e.Content = append(e.Content, o.Content...)
	for _, c := range o.Calls {
		if n := len(e.Calls); n > 0 && c.ID == "" && e.Calls[n-1].Index == c.Index {
			e.Calls[n-1].Args += c.Args
			continue
		}
		e.Calls = append(e.Calls, c)
	}
}
