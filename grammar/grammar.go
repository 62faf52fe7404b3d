package grammar

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/llmserve/llmserve/grammar/internal/chardfa"
)

// WhitespaceMode selects the whitespace JSON grammars allow between tokens.
type WhitespaceMode int

const (
	// Compact allows no insignificant whitespace.
	Compact WhitespaceMode = iota
	// Flexible allows JSON whitespace between tokens.
	Flexible
)

// Limits bound compile-time work; zero fields take defaults.
type Limits struct {
	MaxSchemaBytes int // longest schema or regex text accepted
	// MaxGBNFBytes is the longest GBNF grammar accepted, checked before it is parsed: hand-written
	// GBNF is a few KB, and the parse and analysis of a 700 KB one took tens of milliseconds of
	// CPU even when refused (default DefaultMaxGBNFBytes)
	MaxGBNFBytes int
	MaxDepth     int // deepest value nesting a schema may describe (its JSON nests up to 2x+2)
	MaxStates    int // largest automaton a compile may build
}

// DefaultMaxGBNFBytes is Limits.MaxGBNFBytes's default: 128 KiB, some thirty times the grammars
// llama.cpp ships, and a parse of at most a few milliseconds.
const DefaultMaxGBNFBytes = 128 << 10

// Options configure a Compiler.
type Options struct {
	Whitespace WhitespaceMode
	Limits     Limits
	CacheSize  int   // most grammars kept (default 256)
	CacheBytes int64 // most bytes of grammars kept, their DFA and masks included (default 64 MiB)
	// Strict closes what a schema leaves open by default: an object schema that lists
	// properties and says nothing about additionalProperties/patternProperties allows no other
	// keys, and a tuple (prefixItems, or an items array) without a tail allows no more items.
	// This is what users of OpenAI's strict mode and XGrammar's default expect, and it only
	// narrows the documents generated (each still validates). Off, JSON Schema's permissive
	// defaults hold (what MaskBench measures).
	Strict bool
}

// Error is a compile error caused by the input (invalid schema, unsupported
// keyword, bad regex, too large); callers report it as a client error.
type Error struct{ Reason string }

func (e *Error) Error() string { return "grammar: " + e.Reason }

func errf(format string, a ...any) *Error { return &Error{Reason: fmt.Sprintf(format, a...)} }

// Compiler compiles grammars over one vocabulary. It is safe for concurrent
// use and caches compiled grammars (LRU).
type Compiler struct {
	vt   *vocabTables
	opts Options

	mu       sync.Mutex
	lru      *list.List
	cache    map[string]*list.Element
	inflight map[string]*flight // compiles under way, which equal requests wait for

	// scratch buffers of the last builder, reused by the next compile so a
	// large automaton is not grown (and its fresh pages faulted in) anew
	// each time; nil while a compile holds them
	scratchMu sync.Mutex
	scratch   *builderScratch
}

type cacheEnt struct {
	key string
	g   *Grammar
	err error
}

// flight is one compile under way; g and err are set before done closes.
type flight struct {
	done    chan struct{}
	g       *Grammar
	err     error
	stopped bool // its context ended the build: nothing was cached
}

// NewCompiler precomputes the vocabulary tables shared by all grammars.
func NewCompiler(v Vocab, eos []int32, opts Options) *Compiler {
	if opts.Limits.MaxSchemaBytes <= 0 {
		opts.Limits.MaxSchemaBytes = 1 << 20
	}
	if opts.Limits.MaxGBNFBytes <= 0 {
		opts.Limits.MaxGBNFBytes = DefaultMaxGBNFBytes
	}
	if opts.Limits.MaxDepth <= 0 {
		opts.Limits.MaxDepth = 64
	}
	if opts.Limits.MaxStates <= 0 {
		opts.Limits.MaxStates = 1 << 20
	}
	if opts.CacheSize <= 0 {
		opts.CacheSize = 256
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 64 << 20
	}
	return &Compiler{vt: newVocabTables(v, eos), opts: opts, lru: list.New(), cache: map[string]*list.Element{},
		inflight: map[string]*flight{}}
}

// cached returns the grammar for key, building it at most once at a time:
// a request for a key being compiled waits for that compile. A build that
// ctx stopped is not cached: a waiter whose own ctx is live builds it anew.
func (c *Compiler) cached(ctx context.Context, key string, build func(ctx context.Context) (*Grammar, error)) (*Grammar, error) {
	key = cacheKey(key)
	for {
		c.mu.Lock()
		if el, ok := c.cache[key]; ok {
			c.lru.MoveToFront(el)
			e := el.Value.(*cacheEnt)
			c.mu.Unlock()
			return e.g, e.err
		}
		if f := c.inflight[key]; f != nil {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("grammar compile abandoned: %w", context.Cause(ctx))
			}
			if f.stopped && ctx.Err() == nil {
				continue
			}
			return f.g, f.err
		}
		f := &flight{done: make(chan struct{})}
		c.inflight[key] = f
		c.mu.Unlock()
		g, err := build(ctx)
		stopped := err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
		if err != nil && !stopped {
			if _, ok := err.(*Error); !ok {
				err = &Error{Reason: err.Error()}
			}
		}
		f.g, f.err, f.stopped = g, err, stopped
		c.mu.Lock()
		delete(c.inflight, key)
		if !stopped {
			c.cache[key] = c.lru.PushFront(&cacheEnt{key: key, g: g, err: err})
			c.evict()
		}
		c.mu.Unlock()
		close(f.done)
		return g, err
	}
}

// maxKeyBytes is the longest cache key kept as it is; a longer one is kept as its SHA-256.
const maxKeyBytes = 256

// cacheKey is the key the cache keeps for key: key itself, or when it is long, a digest of it
// (marked by a byte no kind prefix starts with). The cache holds refusals too, which count for
// no bytes of grammar: kept whole, the keys of 256 refused 700 KB grammars held 180 MB.
func cacheKey(key string) string {
	if len(key) <= maxKeyBytes {
		return key
	}
	h := sha256.New()
	for i := 0; i < len(key); i += 32 << 10 { // in pieces: no copy of the whole text
		h.Write([]byte(key[i:min(len(key), i+32<<10)]))
	}
	return "#" + string(h.Sum(nil))
}

// evict drops the least recently used grammars while the cache holds more
// than CacheSize of them or more than CacheBytes, the newest always kept.
// Grammars grow as matchers use them (DFA states, masks), so the sizes are
// read now rather than when each was added; a large heap of stale grammars
// would make every compile fault in fresh memory and the GC mark more.
func (c *Compiler) evict() {
	var total int64
	for el := c.lru.Front(); el != nil; el = el.Next() {
		if g := el.Value.(*cacheEnt).g; g != nil {
			total += g.Bytes()
		}
	}
	for c.lru.Len() > 1 && (c.lru.Len() > c.opts.CacheSize || total > c.opts.CacheBytes) {
		el := c.lru.Back()
		e := el.Value.(*cacheEnt)
		if e.g != nil {
			total -= e.g.Bytes()
		}
		c.lru.Remove(el)
		delete(c.cache, e.key)
	}
}

func (c *Compiler) finish(b *builder, root fragment) (*Grammar, error) {
	if b.over {
		return nil, b.overErr("grammar")
	}
	g := b.g
	g.nodes[root.out].final = true
	b.flatten()
	// the grammar keeps an exact copy and the builder's buffers go back,
	// unless they are too large to keep: then the grammar keeps the nodes
	// as built (a copy would be the largest allocation of the compile)
	buf := g.nodes
	if cap(buf) <= scratchKeep {
		g.nodes = slices.Clone(buf)
	} else {
		buf = nil
	}
	g.rules[0] = root.in
	if prod := g.productive(); !prod[root.in] {
		err := b.emptyError(prod)
		c.release(b, buf)
		return nil, err
	} else {
		g.prune(prod)
	}
	c.release(b, buf)
	// the DFA is about half a compile's work: a compile given up while the automaton was built
	// or pruned stops here rather than finish a grammar nobody waits for
	if b.ctx != nil && b.ctx.Err() != nil {
		b.stopped = context.Cause(b.ctx)
		return nil, b.overErr("grammar")
	}
	g.initDFA(c.opts.Limits.MaxStates)
	if err := g.checkMaskCost(); err != nil {
		return nil, err
	}
	g.grow(len(g.nodes)*int(unsafe.Sizeof(node{})) + len(g.edges)*int(unsafe.Sizeof(edge{})) +
		4*(len(g.eps)+len(g.rules)) + 16*len(g.classes))
	return g, nil
}

// JSONSchema compiles a JSON Schema document, strict as Options.Strict says.
func (c *Compiler) JSONSchema(schema string) (*Grammar, error) {
	return c.JSONSchemaStrict(schema, c.opts.Strict)
}

// JSONSchemaStrict compiles a JSON Schema document with strict mode chosen
// per call (a request's json_schema.strict): true closes objects and tuples
// the schema leaves open by default, false keeps JSON Schema's permissive
// defaults (see Options.Strict).
func (c *Compiler) JSONSchemaStrict(schema string, strict bool) (*Grammar, error) {
	return c.jsonSchema(context.Background(), schema, strict)
}

func (c *Compiler) jsonSchema(ctx context.Context, schema string, strict bool) (*Grammar, error) {
	if len(schema) > c.opts.Limits.MaxSchemaBytes {
		return nil, errf("schema is %d bytes, over the %d byte limit", len(schema), c.opts.Limits.MaxSchemaBytes)
	}
	key := "s\x00"
	if strict {
		key = "S\x00"
	}
	return c.cached(ctx, key+schema, func(ctx context.Context) (*Grammar, error) { return c.compileSchema(ctx, schema, strict) })
}

// JSONObject compiles a grammar for any JSON object.
func (c *Compiler) JSONObject() (*Grammar, error) { return c.jsonObject(context.Background()) }

func (c *Compiler) jsonObject(ctx context.Context) (*Grammar, error) {
	return c.cached(ctx, "o\x00", func(ctx context.Context) (*Grammar, error) {
		return c.compileSchema(ctx, `{"type":"object"}`, false)
	})
}

// Regex compiles a grammar for strings fully matching pattern.
func (c *Compiler) Regex(pattern string) (*Grammar, error) {
	return c.regex(context.Background(), pattern)
}

func (c *Compiler) regex(ctx context.Context, pattern string) (*Grammar, error) {
	if len(pattern) > c.opts.Limits.MaxSchemaBytes {
		return nil, errf("regex is %d bytes, over the %d byte limit", len(pattern), c.opts.Limits.MaxSchemaBytes)
	}
	return c.cached(ctx, "r\x00"+pattern, func(ctx context.Context) (*Grammar, error) {
		d, err := chardfa.Regex(pattern, false)
		if err != nil {
			return nil, err
		}
		b := c.newBuilder(ctx)
		b.g.rules = []int32{0}
		b.emptyWhat = fmt.Sprintf("regex %q matches no string", pattern)
		return c.finish(b, b.rawChars(d))
	})
}
