package runner

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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
		slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
}

// start returns a constraint whose matcher appears once the grammar is compiled. The compile
// runs on a goroutine counted in wg, and ends with ctx.
func (gs *Grammars) start(ctx context.Context, wg *sync.WaitGroup, s grammar.Spec) *constraint {
	c := &constraint{maskDeadline: gs.maskDeadline}
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
	// encode tokenizes the bytes the grammar forces (jump-forward drafts); nil drafts none.
	encode       func(text string) []int32
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
		return
	}
	if err := c.m.FillMaskWithin(dst, time.Now().Add(c.maskDeadline)); err != nil {
		if errors.Is(err, grammar.ErrMaskDeadline) { // the grammar's cost: the client's to fix
			err = &scheduler.RequestError{Kind: scheduler.ErrorInvalid,
				Err: fmt.Errorf("token mask over its %v deadline (the grammar is too costly to follow): %w", c.maskDeadline, err)}
		}
		c.maskErr = err
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

// forcedDraftBytes bounds the forced bytes tokenized for one draft: ample for the longest
// draft (scheduler.MaxDraftLimit tokens) without tokenizing a 4 KiB literal every step.
const forcedDraftBytes = 1024

// ForcedTokens appends the tokens that spell the bytes the grammar admits as the only
// continuation (the tokenizer's encoding of them), cut at max tokens and at the first token the
// matcher refuses (an encoding may merge past a byte the grammar requires elsewhere).
func (c *constraint) ForcedTokens(dst []int32, max int) []int32 {
	if c.m == nil || c.encode == nil || c.Err() != nil || max <= 0 {
		return dst
	}
	fb := c.m.ForcedBytes()
	if len(fb) == 0 {
		return dst
	}
	toks := c.encode(string(fb[:min(len(fb), forcedDraftBytes)]))
	n := 0
	for _, tok := range toks {
		if n == max || !c.m.Accept(tok) {
			break
		}
		n++
	}
	c.m.Rollback(n)
	return append(dst, toks[:n]...)
}

// Admits counts the leading tokens of toks the grammar accepts in turn, and undoes them.
func (c *constraint) Admits(toks []int32) int {
	if c.m == nil || c.Err() != nil {
		return 0
	}
	n := 0
	for _, tok := range toks {
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
