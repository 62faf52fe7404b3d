// Package replay is the token-replay runner: a BENCHMARK TOOL that implements backend.Backend
// without any model math. It exists only to measure the serving pipeline (scheduler, sockets,
// detokenizer, HTTP) with the model's cost taken out, and is never a default.
//
// Every logits row it returns is zero except for one token, which therefore wins greedy decoding
// (and, at WinnerLogit, any temperature up to about 3). The winner is a fixed function of the
// token being decoded, its position and two earlier tokens that the runner reads back from its
// KV cache through the sequence's block table (see NextToken), so a request's output is a
// deterministic token sequence, and a wrong block table, a prefix block shared by mistake or a
// KV slot the scheduler forgot to fill changes that output or fails the step. The "KV cache" is
// one int32 (the token id) per slot, so the runner stays cheap at any batch size.
package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
)

// WinnerLogit is the logit of the chosen token; every other entry of a row is 0. It is large
// enough that sampling at temperatures up to about 3 prunes every other token.
const WinnerLogit = 100

// unwritten marks a KV slot that no Forward has filled yet.
const unwritten = -1

// Options configures a Runner.
type Options struct {
	// VocabSize is the length of a logits row.
	VocabSize int
	// NumBlocks is the number of KV blocks in the pool.
	NumBlocks int
	// BlockSize is the number of token positions per block.
	BlockSize int
	// StepTime is the least time one Forward takes, to imitate a device step; 0 returns at once.
	StepTime time.Duration
	// TokenTime is added to StepTime per token of the batch, so prefills cost in proportion
	// to the tokens computed (what a prefix cache saves) as on a device.
	TokenTime time.Duration
	// BusyWait spins for StepTime instead of sleeping, for sub-millisecond step times that a
	// timer would overshoot.
	BusyWait bool
}

// Tuning is the runner's own settings, passed as backend.Options.Tuning (a Tuning or a
// *Tuning; nil for none) when it is opened through the registry as "replay".
type Tuning struct {
	// StepTime, TokenTime and BusyWait are Options'.
	StepTime, TokenTime time.Duration
	BusyWait            bool
}

func init() {
	backend.Register("replay", open)
}

// open is the registry's constructor: the vocabulary from m.Config (m needs no weights), the
// pool from opts.NumBlocks (or opts.KVCacheBytes at 4 bytes a position), block size 16 unless
// set.
func open(m *model.Model, opts backend.Options) (backend.Backend, error) {
	if m == nil {
		return nil, errors.New("replay runner: nil model")
	}
	var t Tuning
	switch v := opts.Tuning.(type) {
	case nil:
	case Tuning:
		t = v
	case *Tuning:
		if v != nil {
			t = *v
		}
	default:
		return nil, fmt.Errorf("replay runner: tuning of type %T is not replay.Tuning", opts.Tuning)
	}
	bs := opts.BlockSize
	if bs == 0 {
		bs = 16
	}
	plan, err := opts.KVBlocks(int64(bs)*4, nil)
	if err != nil {
		return nil, fmt.Errorf("replay runner: %w", err)
	}
	return New(Options{VocabSize: m.Config.VocabSize, NumBlocks: plan.Blocks, BlockSize: bs, StepTime: t.StepTime, TokenTime: t.TokenTime, BusyWait: t.BusyWait})
}

// Stats counts the work Forward was given.
type Stats struct {
	// Forwards counts calls to Forward that succeeded.
	Forwards int
	// Tokens counts the tokens of all sequences of those calls.
	Tokens int
	// Rows counts the logits rows returned.
	Rows int
}

// Runner is the token-replay implementation of backend.Backend (benchmark only). Forward must
// not be called concurrently.
type Runner struct {
	opts Options
	// kv holds the token id written at each slot (block*BlockSize + offset), or unwritten.
	kv []int32
	// rows are the logits rows handed out, reused across steps; winner[i] is the one nonzero
	// entry of rows[i] (-1 while the row is all zero), so a step touches two entries per row.
	rows   [][]float32
	winner []int32
	out    [][]float32
	outWin []int32 // winner of out[i], -1 for a nil row (see Argmax)
	// picks and scratch serve ForwardSample, reused across steps.
	picks   []backend.Pick
	scratch sampling.Scratch
	stats   Stats
	closed  bool
}

var (
	_ backend.Backend       = (*Runner)(nil)
	_ backend.DeviceArgmax  = (*Runner)(nil)
	_ backend.DeviceSampler = (*Runner)(nil)
)

// New returns a token-replay runner (benchmark only: it does no model math).
func New(opts Options) (*Runner, error) {
	if opts.VocabSize <= 0 || opts.NumBlocks <= 0 || opts.BlockSize <= 0 {
		return nil, fmt.Errorf("replay runner: VocabSize, NumBlocks and BlockSize must be > 0, got %d, %d, %d",
			opts.VocabSize, opts.NumBlocks, opts.BlockSize)
	}
	if opts.VocabSize > math.MaxInt32 || int64(opts.NumBlocks)*int64(opts.BlockSize) > math.MaxInt32 {
		return nil, fmt.Errorf("replay runner: %d blocks of %d positions (vocab %d) is too many",
			opts.NumBlocks, opts.BlockSize, opts.VocabSize)
	}
	if opts.StepTime < 0 || opts.TokenTime < 0 {
		return nil, fmt.Errorf("replay runner: negative StepTime %v or TokenTime %v", opts.StepTime, opts.TokenTime)
	}
	kv := make([]int32, opts.NumBlocks*opts.BlockSize)
	for i := range kv {
		kv[i] = unwritten
	}
	return &Runner{opts: opts, kv: kv}, nil
}

// NumBlocks is the number of KV blocks in the pool.
func (r *Runner) NumBlocks() int { return r.opts.NumBlocks }

// BlockSize is the number of token positions per block.
func (r *Runner) BlockSize() int { return r.opts.BlockSize }

// VocabSize is the length of a logits row.
func (r *Runner) VocabSize() int { return r.opts.VocabSize }

// Stats returns the work done since New.
func (r *Runner) Stats() Stats { return r.stats }

// Close releases the rows and the KV slots; Forward fails afterwards.
func (r *Runner) Close() error {
	r.closed = true
	r.kv, r.rows, r.winner, r.out, r.outWin = nil, nil, nil, nil, nil
	return nil
}

// Forward writes every sequence's tokens into its KV slots and returns, for each sequence with
// Logits set, a row whose only nonzero entry is NextToken of its last token. Rows are reused by
// the next call: callers must treat them as read-only (a row a caller changed is not restored).
// A malformed batch (empty chunk, token outside the vocabulary, block table too short, block id
// out of range, a read of a slot never written) is an error, and the step changes nothing.
func (r *Runner) Forward(ctx context.Context, b *backend.Batch) ([][]float32, error) {
	if r.closed {
		return nil, errors.New("replay runner: Forward after Close")
	}
	if b == nil {
		return nil, errors.New("replay runner: nil batch")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	// Validate everything first so a bad batch leaves the cache untouched.
	tokens := 0
	for i := range b.Seqs {
		if err := r.check(&b.Seqs[i]); err != nil {
			return nil, fmt.Errorf("replay runner: seq %d of %d: %w", i, len(b.Seqs), err)
		}
		tokens += len(b.Seqs[i].Tokens)
	}
	for i := range b.Seqs {
		s := &b.Seqs[i]
		for j, tok := range s.Tokens {
			r.kv[r.slot(s.BlockTable, s.Pos+j)] = tok
		}
	}
	out, outWin := r.out[:0], r.outWin[:0]
	nrows := 0
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if !s.Logits {
			out, outWin = append(out, nil), append(outWin, -1)
			continue
		}
		tok := r.next(s)
		out, outWin = append(out, r.row(nrows, tok)), append(outWin, tok)
		nrows++
	}
	r.out, r.outWin = out, outWin
	if err := r.wait(ctx, start, r.opts.StepTime+time.Duration(tokens)*r.opts.TokenTime); err != nil {
		return nil, err
	}
	r.stats.Forwards++
	r.stats.Tokens += tokens
	r.stats.Rows += nrows
	return out, nil
}

// Argmax is row i's winner (the only nonzero entry, so also its argmax), as a device backend
// would take it without the host reading the row: a greedy batch then costs the scheduler no
// scan of VocabSize logits per request, which a device engine does not pay either.
func (r *Runner) Argmax(i int) int32 {
	if i < 0 || i >= len(r.outWin) {
		return -1
	}
	return r.outWin[i]
}

// ForwardSample is Forward followed by the picks a sampling device would return: a plain
// greedy row's winner without touching the row, and every other row through the host sampler
// (backend.HostSample), so its picks are exactly the scheduler's host path's. It returns no
// host rows (the runner refuses AllLogits).
func (r *Runner) ForwardSample(ctx context.Context, b *backend.Batch, specs []backend.SampleSpec, masks func()) ([]backend.Pick, [][]float32, error) {
	if b != nil && len(specs) != len(b.Seqs) {
		return nil, nil, fmt.Errorf("replay runner: %d sample specs for %d sequences", len(specs), len(b.Seqs))
	}
	rows, err := r.Forward(ctx, b)
	if masks != nil {
		masks()
	}
	if err != nil {
		return nil, nil, err
	}
	if cap(r.picks) < len(rows) {
		r.picks = append(r.picks[:cap(r.picks)], make([]backend.Pick, len(rows)-cap(r.picks))...)
	}
	picks := r.picks[:len(rows)]
	for i, row := range rows {
		p := &picks[i]
		p.Token, p.Logprob, p.TopIDs, p.TopLogprobs = -1, 0, p.TopIDs[:0], p.TopLogprobs[:0]
		if row == nil {
			continue
		}
		if sp := &specs[i]; sp.PlainGreedy() {
			p.Token = r.outWin[i]
		} else {
			backend.HostSample(row, sp, &r.scratch, p)
		}
	}
	r.picks = picks
	return picks, nil, nil
}

// check validates one sequence against the pool.
func (r *Runner) check(s *backend.Seq) error {
	if len(s.Tokens) == 0 {
		return errors.New("no tokens")
	}
	if s.AllLogits {
		return errors.New("the replay runner has no logits at every position (prompt logprobs)")
	}
	if s.Pos < 0 {
		return fmt.Errorf("negative position %d", s.Pos)
	}
	for j, tok := range s.Tokens {
		if tok < 0 || int(tok) >= r.opts.VocabSize {
			return fmt.Errorf("token %d at position %d outside the vocabulary [0, %d)", tok, s.Pos+j, r.opts.VocabSize)
		}
	}
	end := s.Pos + len(s.Tokens)
	need := (end + r.opts.BlockSize - 1) / r.opts.BlockSize
	if len(s.BlockTable) < need {
		return fmt.Errorf("block table has %d blocks, positions [0, %d) need %d", len(s.BlockTable), end, need)
	}
	for k, blk := range s.BlockTable[:need] {
		if blk < 0 || int(blk) >= r.opts.NumBlocks {
			return fmt.Errorf("block table entry %d is block %d, outside the pool [0, %d)", k, blk, r.opts.NumBlocks)
		}
	}
	if p := end - 1; s.Logits && p > 0 {
		// The positions NextToken reads must hold a token already, unless this chunk writes them.
		for _, q := range [2]int{p - 1, ProbePosition(p)} {
			if q < s.Pos && r.kv[r.slot(s.BlockTable, q)] == unwritten {
				return fmt.Errorf("decoding position %d reads position %d, whose KV slot (block %d) was never written",
					p, q, s.BlockTable[q/r.opts.BlockSize])
			}
		}
	}
	return nil
}

func (r *Runner) slot(table []int32, pos int) int {
	return int(table[pos/r.opts.BlockSize])*r.opts.BlockSize + pos%r.opts.BlockSize
}

// next reads the context the replay function needs back from the KV slots (check made sure
// they are written).
func (r *Runner) next(s *backend.Seq) int32 {
	p := s.Pos + len(s.Tokens) - 1
	prev, probe := int32(unwritten), int32(unwritten)
	if p > 0 {
		prev = r.kv[r.slot(s.BlockTable, p-1)]
		probe = r.kv[r.slot(s.BlockTable, ProbePosition(p))]
	}
	return NextToken(r.opts.VocabSize, s.Tokens[len(s.Tokens)-1], prev, probe, p)
}

// row returns rows[k] with its one nonzero entry moved to tok.
func (r *Runner) row(k int, tok int32) []float32 {
	if k == len(r.rows) {
		r.rows = append(r.rows, make([]float32, r.opts.VocabSize))
		r.winner = append(r.winner, -1)
	}
	row := r.rows[k]
	if w := r.winner[k]; w >= 0 {
		row[w] = 0
	}
	row[tok] = WinnerLogit
	r.winner[k] = tok
	return row
}

// wait pads the step to d.
func (r *Runner) wait(ctx context.Context, start time.Time, d time.Duration) error {
	left := d - time.Since(start)
	if left <= 0 {
		return nil
	}
	if r.opts.BusyWait {
		for time.Since(start) < d {
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProbePosition is the earlier position (in [0, p)) whose token NextToken mixes in when
// decoding position p > 0; it moves around so that every block of a long context is read back
// at some step.
func ProbePosition(p int) int {
	return int(mix64(uint64(p)*0x9e3779b97f4a7c15) % uint64(p))
}

// NextToken is the token the replay runner makes win after the token last at position p, where
// prev is the token at p-1 and probe the token at ProbePosition(p) (both -1 when p is 0).
func NextToken(vocab int, last, prev, probe int32, p int) int32 {
	h := uint64(uint32(last)) | uint64(uint32(prev))<<32
	h = mix64(h ^ mix64(uint64(uint32(probe))|uint64(p)<<32))
	return int32(h % uint64(vocab))
}

// Continuation returns the n tokens that greedy decoding with the replay runner generates after
// prompt, computed directly from the token list: the reference that tests compare the serving
// pipeline's output with.
func Continuation(vocab int, prompt []int32, n int) []int32 {
	if len(prompt) == 0 {
		return nil
	}
	seq := append([]int32(nil), prompt...)
	for range n {
		p := len(seq) - 1
		prev, probe := int32(unwritten), int32(unwritten)
		if p > 0 {
			prev, probe = seq[p-1], seq[ProbePosition(p)]
		}
		seq = append(seq, NextToken(vocab, seq[p], prev, probe, p))
	}
	return seq[len(prompt):]
}

// mix64 is the splitmix64 finalizer: a cheap bijection that spreads every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
