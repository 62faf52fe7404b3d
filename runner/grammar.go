package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/scheduler"
)

// Grammars compiles structured-output constraints for one rank off the step loop: a request
// waits (scheduler.Request.Ready) until its grammar is compiled, the batch does not. Equal
// specs compile once: the Compiler caches results and lets concurrent requests for one spec
// wait for a single compile. Compiles are bounded: at most slots at once, each within timeout
// (a request whose compile does not finish in time fails), and a slot is freed only when its
// compile's work has stopped. Each mask is bounded by maskDeadline: the scheduler computes
// masks while the forward runs and waits for them all, so a mask that would take seconds
// fails its own request instead of holding every request's step.
type Grammars struct {
	c            *grammar.Compiler
	timeout      time.Duration // one request's compile
	maskDeadline time.Duration // one mask
	slots        chan struct{} // one token per compile running
	// canonical: where a grammar forces a literal, its masks admit the tokenizer's own
	// spelling of it only (SetCanonicalLiterals).
	canonical bool
}

// DefaultMaskDeadline bounds one token mask. Masks are cached per DFA state and most take
// microseconds; a state's first can take tens of milliseconds on a large vocabulary. Grammars
// whose masks cost seconds are refused at compile time; this catches what that cannot see.
const DefaultMaskDeadline = 500 * time.Millisecond

// DefaultCompileTimeout bounds one request's wait for its grammar.
const DefaultCompileTimeout = 30 * time.Second

// NewGrammars wraps a compiler over the model's vocabulary.
func NewGrammars(c *grammar.Compiler) *Grammars {
	return &Grammars{c: c, timeout: DefaultCompileTimeout, maskDeadline: DefaultMaskDeadline,
		slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)), canonical: true}
}

// SetCanonicalLiterals sets whether, where a grammar admits exactly one continuation (a
// property name, the rest of an enum value, a tool call's opening), the token mask admits only
// the tokenizer's own first token of it (and the tokens that run past it), not every token that
// spells a prefix of it; on by default. Outputs then spell forced text as the tokenizer would,
// whatever the model prefers among the splits, and grammar jump-forward drafts are always
// accepted. Requests started before the call keep the setting they started with.
func (gs *Grammars) SetCanonicalLiterals(on bool) { gs.canonical = on }

// start returns a constraint whose matcher appears once the grammar is compiled. The compile
// runs on a goroutine counted in wg, and ends with ctx.
func (gs *Grammars) start(ctx context.Context, wg *sync.WaitGroup, s grammar.Spec) *constraint {
	c := &constraint{maskDeadline: gs.maskDeadline, canonical: gs.canonical}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.ready.Store(true) // publishes m and err
		ctx, cancel := context.WithTimeout(ctx, gs.timeout)
		defer cancel()
		select {
		case gs.slots <- struct{}{}:
			defer func() { <-gs.slots }()
		case <-ctx.Done():
			c.err = fmt.Errorf("compile %s constraint: no compile slot: %w", s.Kind, context.Cause(ctx))
			return
		}
		// CompileWait: the slot stays taken until the work has stopped (ctx stops it)
		gr, err := gs.c.CompileWait(ctx, s)
		if err != nil {
			c.err = fmt.Errorf("compile %s constraint: %w", s.Kind, err)
			if _, ok := errors.AsType[*grammar.Error](err); ok { // the grammar itself: the client's to fix
				c.err = &scheduler.RequestError{Kind: scheduler.ErrorInvalid, Err: c.err}
			}
			return
		}
		c.m = gr.NewMatcher()
	}()
	return c
}

// constraint adapts a grammar matcher to scheduler.Constraint. The scheduler reads it only
// after Ready reports true, which publishes m and err; it never calls two methods at once, so
// maskErr (written by FillMask, read by Err and Accept) needs no lock.
type constraint struct {
	ready atomic.Bool
	m     *grammar.Matcher
	// encode tokenizes the bytes the grammar forces (jump-forward drafts and canonical
	// literals); nil drafts none and leaves masks as the grammar gives them.
	encode func(text string) []int32
	// canonical narrows masks where the grammar forces a literal (Grammars.SetCanonicalLiterals).
	canonical    bool
	fbuf         []byte        // scratch: the forced bytes
	err          error         // the compile's
	maskDeadline time.Duration // bounds each FillMask (0: none)
	maskErr      error         // the last FillMask's: it missed its deadline
}

// Ready reports whether compilation has finished (successfully or not).
func (c *constraint) Ready() bool { return c.ready.Load() }

// Err is the compile error, or the last mask's, either of which fails the request.
func (c *constraint) Err() error {
	if c.err != nil {
		return c.err
	}
	return c.maskErr
}

func (c *constraint) FillMask(dst []uint64) {
	if c.m == nil {
		return
	}
	if c.maskDeadline <= 0 {
		c.m.FillMask(dst)
	} else if err := c.m.FillMaskWithin(dst, time.Now().Add(c.maskDeadline)); err != nil {
		if errors.Is(err, grammar.ErrMaskDeadline) { // the grammar's cost: the client's to fix
			err = &scheduler.RequestError{Kind: scheduler.ErrorInvalid,
				Err: fmt.Errorf("token mask over its %v deadline (the grammar is too costly to follow): %w", c.maskDeadline, err)}
		}
		c.maskErr = err
		return
	}
	if c.canonical {
		if tok, n, ok := c.canonicalFirst(); ok {
			c.m.Rollback(1)
			c.m.KeepForcedSpelling(dst, n, tok)
		}
	}
}

func (c *constraint) Accept(tok int32) error {
	if err := c.Err(); err != nil {
		return err
	}
	if !c.m.Accept(tok) {
		if c.m.Exhausted() {
			return fmt.Errorf("token %d: %w", tok, grammar.ErrDFAExhausted)
		}
		return fmt.Errorf("token %d is not allowed by the grammar here", tok)
	}
	return nil
}

// canonicalEncodeBytes bounds the forced bytes tokenized per canonical token: a literal's first
// token is settled well within them (a longer first token, a run of one character, is left to
// the grammar's mask), and tokenizing them costs microseconds per step.
const canonicalEncodeBytes = 64

// canonicalFirst finds the tokenizer's own first token of the literal the grammar forces from
// here: the first token of the encoding of at most canonicalEncodeBytes of it, cut back to whole
// characters. It returns the token, accepted by the matcher (the caller rolls it back), and how
// many bytes are forced, counted up to one past the longest token (no token spells past more).
// ok is false, and nothing is accepted, where nothing is forced, where the token is not settled
// by the bytes encoded (it covers them all and more bytes are forced: the cut, or a character
// the grammar forces only part of), and where the grammar refuses it (an encoding that
// normalizes the text or adds to it). Mask, drafts and Admits all call it, so the drafts are
// exactly the tokens the narrowed masks admit.
func (c *constraint) canonicalFirst() (tok int32, forced int, ok bool) {
	if c.encode == nil {
		return 0, 0, false
	}
	limit := max(c.m.MaxTokenLen()+1, canonicalEncodeBytes)
	fb := c.m.AppendForced(c.fbuf[:0], limit)
	c.fbuf = fb
	enc := fb[:min(len(fb), canonicalEncodeBytes)]
	cut := len(enc) < len(fb) || len(fb) == limit
	// Whole characters only: the tokenizer reads a cut one as U+FFFD.
	for i := 0; i < len(enc); {
		r, size := utf8.DecodeRune(enc[i:])
		if r == utf8.RuneError && size <= 1 {
			enc, cut = enc[:i], true
			break
		}
		i += size
	}
	if len(enc) == 0 {
		return 0, 0, false
	}
	toks := c.encode(string(enc))
	if len(toks) == 0 {
		return 0, 0, false
	}
	tok = toks[0]
	if l := c.m.TokenLen(tok); l == 0 || cut && l >= len(enc) || !c.m.Accept(tok) {
		return 0, 0, false
	}
	return tok, len(fb), true
}

// ForcedTokens appends the tokens that spell the bytes the grammar admits as the only
// continuation, token by token the tokenizer's own first token of what remains of them
// (canonicalFirst), cut at max tokens and where that token is not settled or the grammar
// refuses it (an encoding may merge past a byte the grammar requires elsewhere).
func (c *constraint) ForcedTokens(dst []int32, max int) []int32 {
	if c.m == nil || c.encode == nil || c.Err() != nil || max <= 0 {
		return dst
	}
	n := 0
	for n < max {
		tok, _, ok := c.canonicalFirst()
		if !ok {
			break
		}
		dst = append(dst, tok)
		n++
	}
	c.m.Rollback(n)
	return dst
}

// Admits counts the leading tokens of toks the grammar accepts in turn (and, with canonical
// literals, the narrowed masks admit), and undoes them.
func (c *constraint) Admits(toks []int32) int {
	if c.m == nil || c.Err() != nil {
		return 0
	}
	n := 0
	for _, tok := range toks {
		if c.canonical {
			// Where a literal is forced, a token that spells part of it otherwise than the
			// tokenizer does is masked out: it can never be accepted.
			if t, forced, ok := c.canonicalFirst(); ok {
				c.m.Rollback(1)
				if l := c.m.TokenLen(tok); tok != t && l > 0 && l <= forced {
					break
				}
			}
		}
		if !c.m.Accept(tok) {
			break
		}
		n++
	}
	c.m.Rollback(n)
	return n
}

func (c *constraint) CanTerminate() bool { return c.m != nil && c.m.CanEnd() }

func (c *constraint) IsTerminated() bool { return c.m != nil && c.m.Done() }
