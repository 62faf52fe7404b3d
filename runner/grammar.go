package runner

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/llmserve/llmserve/grammar"
)

// Grammars compiles structured-output constraints for one rank off the step loop: a request
// waits (scheduler.Request.Ready) until its grammar is compiled, the batch does not. Equal
// specs compile once: the Compiler caches results and lets concurrent requests for one spec
// wait for a single compile.
type Grammars struct {
	c *grammar.Compiler
}

// NewGrammars wraps a compiler over the model's vocabulary.
func NewGrammars(c *grammar.Compiler) *Grammars { return &Grammars{c: c} }

// start returns a constraint whose matcher appears once the grammar is compiled.
func (gs *Grammars) start(s grammar.Spec) *constraint {
	c := &constraint{}
	go func() {
		gr, err := gs.c.Compile(context.Background(), s)
		if err != nil {
			c.err = fmt.Errorf("compile %s constraint: %w", s.Kind, err)
		} else {
			c.m = gr.NewMatcher()
		}
		c.ready.Store(true)
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
