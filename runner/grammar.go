package runner

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmserve/llmserve/grammar"
)

// Grammars compiles structured-output constraints for one rank off the step loop: a request
// waits (scheduler.Request.Ready) until its grammar is compiled, the batch does not. Equal
// specs compile once: the Compiler caches results and lets concurrent requests for one spec
// wait for a single compile. Compiles are bounded: at most slots at once, each within timeout
// (a request whose compile does not finish in time fails).
type Grammars struct {
	c       *grammar.Compiler
	timeout time.Duration
	slots   chan struct{} // one token per compile running
}

// DefaultCompileTimeout bounds one request's wait for its grammar.
const DefaultCompileTimeout = 30 * time.Second

// NewGrammars wraps a compiler over the model's vocabulary.
func NewGrammars(c *grammar.Compiler) *Grammars {
	return &Grammars{c: c, timeout: DefaultCompileTimeout, slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
}

// start returns a constraint whose matcher appears once the grammar is compiled. The compile
// runs on a goroutine counted in wg, and ends with ctx.
func (gs *Grammars) start(ctx context.Context, wg *sync.WaitGroup, s grammar.Spec) *constraint {
	c := &constraint{}
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
		gr, err := gs.c.Compile(ctx, s)
		if err != nil {
			c.err = fmt.Errorf("compile %s constraint: %w", s.Kind, err)
			return
		}
		c.m = gr.NewMatcher()
	}()
	return c
}

// constraint adapts a grammar matcher to scheduler.Constraint. The scheduler reads it only
// after Ready reports true, which publishes m and err.
type constraint struct {
	ready atomic.Bool
	m     *grammar.Matcher
	err   error
}

// Ready reports whether compilation has finished (successfully or not).
func (c *constraint) Ready() bool { return c.ready.Load() }

// Err is the compile error, which fails the request.
func (c *constraint) Err() error { return c.err }

func (c *constraint) FillMask(dst []uint64) {
	if c.m != nil {
		c.m.FillMask(dst)
	}
}

func (c *constraint) Accept(tok int32) error {
	if c.err != nil {
		return c.err
	}
	if !c.m.Accept(tok) {
		return fmt.Errorf("token %d is not allowed by the grammar here", tok)
	}
	return nil
}

func (c *constraint) CanTerminate() bool { return c.m != nil && c.m.CanEnd() }

func (c *constraint) IsTerminated() bool { return c.m != nil && c.m.Done() }
