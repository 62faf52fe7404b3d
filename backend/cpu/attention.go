package cpu

import (
	"math"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/internal/parallel"
)

//go:generate go run gen_attn.go

// Tiling of long chunks in attendGEMM: at most attnTileTokens query tokens per tile (the
// default of Backend.attnTile), and at most attnScoreBudget scores (floats) per tile.
const (
	attnTileTokens  = 256
	attnScoreBudget = 1 << 22
)

// attention computes, for every sequence and query head, softmax(q·Kᵀ/√d)·V over the positions
// [0, pos] of each query token (causal within the chunk), with K and V read from the sequence's
// blocks of layer l. The output goes to b.attn. Work items are (sequence, KV head) pairs, so the
// query heads that share a KV head reuse its keys and values.
//
// Generated chunks (decodes) run as dot products, each token as its one-token decode would;
// prompt chunks as matrix products, except those shorter than gemmAttentionMinTokens, which take
// the dot products too (b.attnGEMMMin); with Deterministic every prompt chunk takes the row-stable
// matrix products. Either way the items are
// spread over the worker goroutines, each item's products, softmax included, on its own worker
// (gemm's serial entry points: no nested parallelism).
func (b *Backend) attention(l int, spans []seqSpan) {
	nkv := b.cfg.NumKVHeads
	var long, direct []int
	for si, sp := range spans {
		if sp.seq.Generated || sp.n < b.attnGEMMMin { // a Generated token attends as its decode would
			direct = append(direct, si)
		} else {
			long = append(long, si)
		}
	}
	parallel.For(len(long)*nkv, b.threads, func(w, item int) {
		b.attendGEMM(l, spans[long[item/nkv]], item%nkv, &b.workers[w])
	})
	parallel.For(len(direct)*nkv, b.threads, func(w, item int) {
		b.attendDirect(l, spans[direct[item/nkv]], item%nkv, &b.workers[w])
	})
}

// attendDirect handles a short chunk (decode tokens, a verify pass's drafted tokens) with dot
// products straight over the cache blocks, a block's rows at a time. Each block is read once
// for all the chunk's tokens and all the query heads that share its KV head (a 16-bit cache
// through attendHalf's kernels where AVX2 is present, else widened into a float32 copy of the
// block first): a verify pass of k tokens reads the context's keys and values once, not k
// times. Every score and output is formed exactly as in a chunk of its token alone (the same
// dot products, the same order of blocks), so a Generated token attends as its decode would.
func (b *Backend) attendDirect(l int, sp seqSpan, kh int, s *attnScratch) {
	cfg := b.cfg
	hd, bs, nkv := cfg.HeadDim, b.blockSize, cfg.NumKVHeads
	group := cfg.NumHeads / nkv
	qDim, qkvDim := cfg.QDim(), cfg.QDim()+2*cfg.KVDim()
	scale := float32(1 / math.Sqrt(float64(hd)))
	table := sp.seq.BlockTable
	simd := b.simd && hd%8 == 0
	if simd && b.kv.typ != backend.KVF32 {
		b.attendHalf(l, sp, kh, s)
		return
	}
	maxCtx := sp.seq.Pos + sp.n
	s.scores = grow(s.scores, sp.n*group*maxCtx)
	s.block = grow(s.block, bs*hd)
	// Token i, head g of the group keeps its scores at [(i·group+g)·maxCtx, ... + ctxLen(i)).
	ctxLen := func(i int) int { return sp.seq.Pos + i + 1 }
	scores := func(i, g int) []float32 {
		o := (i*group + g) * maxCtx
		return s.scores[o : o+ctxLen(i)]
	}
	query := func(i, g int) []float32 {
		r, qh := sp.start+i, kh*group+g
		return b.qkv[r*qkvDim+qh*hd : r*qkvDim+(qh+1)*hd]
	}
	output := func(i, g int) []float32 {
		r, qh := sp.start+i, kh*group+g
		return b.attn[r*qDim+qh*hd : r*qDim+(qh+1)*hd]
	}
	// blockOff is where the cache block holding positions [j0, j0+bs) starts for this KV head.
	blockOff := func(j0 int) int { return (int(table[j0/bs])*nkv + kh) * bs * hd }
	for j0 := 0; j0 < maxCtx; j0 += bs {
		cnt := min(bs, maxCtx-j0)
		off := blockOff(j0)
		keys := b.kv.keys(l, off, cnt*hd, s.block)
		// Tokens before the block's end see only part of it; those before its start none.
		for i := max(0, j0-sp.seq.Pos); i < sp.n; i++ {
			c := min(cnt, ctxLen(i)-j0)
			for g := range group {
				dotRows(query(i, g), keys, hd, scores(i, g)[j0:j0+c], simd)
			}
		}
	}
	for i := range sp.n {
		for g := range group {
			softmaxScaled(scores(i, g), scale, simd)
			clear(output(i, g))
		}
	}
	for j0 := 0; j0 < maxCtx; j0 += bs {
		cnt := min(bs, maxCtx-j0)
		off := blockOff(j0)
		values := b.kv.values(l, off, cnt*hd, s.block)
		for i := max(0, j0-sp.seq.Pos); i < sp.n; i++ {
			c := min(cnt, ctxLen(i)-j0)
			for g := range group {
				axpyRows(scores(i, g)[j0:j0+c], values, hd, output(i, g), simd)
			}
		}
	}
}

// attendGEMM handles a long chunk (prefill) for one KV head: it gathers the sequence's keys and
// values into contiguous [context][head dim] matrices and the queries of the heads sharing them
// into a [chunk·group][head dim] matrix (row i·group+g is token i, head g of the group), then
// computes all scores and weighted values as two matrix products. Scores past a token's own
// position are masked out before the softmax.
func (b *Backend) attendGEMM(l int, sp seqSpan, kh int, s *attnScratch) {
	cfg := b.cfg
	hd, bs, nkv := cfg.HeadDim, b.blockSize, cfg.NumKVHeads
	group := cfg.NumHeads / nkv
	scale := float32(1 / math.Sqrt(float64(hd)))
	n := sp.n
	ctxLen := sp.seq.Pos + n
	tile := max(1, min(n, b.attnTile, attnScoreBudget/(group*ctxLen)))
	// Room for the row-stable products to run to a multiple of gemm.ColumnQuantum keys (see
	// attendTile), over zero rows.
	padded := roundUp(ctxLen, gemm.ColumnQuantum)
	s.keys = grow(s.keys, padded*hd)
	s.values = grow(s.values, padded*hd)
	clear(s.keys[ctxLen*hd:])
	clear(s.values[ctxLen*hd:])
	s.queries = grow(s.queries, tile*group*hd)
	s.out = grow(s.out, tile*group*hd)
	s.scores = grow(s.scores, tile*group*padded)
	for j0 := 0; j0 < ctxLen; j0 += bs {
		cnt := min(bs, ctxLen-j0)
		src := (int(sp.seq.BlockTable[j0/bs])*nkv + kh) * bs * hd
		keys, values := s.keys[j0*hd:(j0+cnt)*hd], s.values[j0*hd:(j0+cnt)*hd]
		// A float32 cache returns views, copied here; a 16-bit one widens straight into place.
		if k := b.kv.keys(l, src, cnt*hd, keys); &k[0] != &keys[0] {
			copy(keys, k)
		}
		if v := b.kv.values(l, src, cnt*hd, values); &v[0] != &values[0] {
			copy(values, v)
		}
	}
	// Query tokens go in tiles so the score matrix stays bounded for long prompts; a tile needs
	// only the context up to its last token, which also skips most of the masked-out products.
	for i0 := 0; i0 < n; i0 += tile {
		i1 := min(n, i0+tile)
		b.attendTile(sp, kh, s, i0, i1, scale)
	}
}

// attendTile computes the attention output of tokens [i0, i1) of the chunk for one KV head, with
// keys and values already gathered into s.
func (b *Backend) attendTile(sp seqSpan, kh int, s *attnScratch, i0, i1 int, scale float32) {
	cfg := b.cfg
	hd := cfg.HeadDim
	group := cfg.NumHeads / cfg.NumKVHeads
	qDim, qkvDim := cfg.QDim(), cfg.QDim()+2*cfg.KVDim()
	span := group * hd
	rows := (i1 - i0) * group
	ctxLen := sp.seq.Pos + i1
	// The group's heads are adjacent within a token's row, so each token contributes one
	// contiguous run of group·hd floats.
	for i := i0; i < i1; i++ {
		src := (sp.start+i)*qkvDim + kh*span
		copy(s.queries[(i-i0)*span:(i-i0+1)*span], b.qkv[src:src+span])
	}
	if !b.deterministic {
		gemm.MatMulNTSerial(rows, ctxLen, hd, s.queries, hd, s.keys, hd, s.scores, ctxLen, false)
		for r := range rows {
			row := s.scores[r*ctxLen : (r+1)*ctxLen]
			valid := row[:sp.seq.Pos+i0+r/group+1]
			softmaxScaled(valid, scale, b.simd)
			clear(row[len(valid):])
		}
		gemm.MatMulNNSerial(rows, hd, ctxLen, s.scores, ctxLen, s.values, hd, s.out, hd, false)
	} else {
		// Row-stable products: a query's scores and weighted values are the same bits whatever
		// tile it is in, so however its prompt is cut into chunks. Both run over the tile's
		// context rounded up to gemm.ColumnQuantum keys: a key's score is then computed alike
		// whatever the count, and the query's zero scores past its own position leave its
		// weighted sums unchanged (gemm.MatMulNNRows).
		ld := roundUp(ctxLen, gemm.ColumnQuantum)
		gemm.MatMulNTRows(1, rows, ld, hd, s.queries, hd, s.keys, hd, s.scores, ld, false)
		for r := range rows {
			row := s.scores[r*ld : (r+1)*ld]
			valid := row[:sp.seq.Pos+i0+r/group+1]
			softmaxScaled(valid, scale, b.simd)
			clear(row[len(valid):])
		}
		gemm.MatMulNNRows(rows, hd, ld, s.scores, ld, s.values, hd, s.out, hd, false)
	}
	for i := i0; i < i1; i++ {
		dst := (sp.start+i)*qDim + kh*span
		copy(b.attn[dst:dst+span], s.out[(i-i0)*span:(i-i0+1)*span])
	}
}

// roundUp is n rounded up to a multiple of q.
func roundUp(n, q int) int { return (n + q - 1) / q * q }

// attendHalf is attendDirect over a 16-bit cache with the AVX2 kernels: the chunk's queries that
// share the KV head (its tokens times the group's heads) meet each cache block together, so a
// verify pass of k tokens widens each key once per pass of up to four queries, and each value
// once per pass of two or, where passes of three run (widePays), once per block, not once per
// token and head pair. Every score and output is formed as in a chunk of its token alone: a score does not
// depend on the queries sharing its pass, and an output element is one chain of fused
// multiply-adds over the positions in order.
func (b *Backend) attendHalf(l int, sp seqSpan, kh int, s *attnScratch) {
	cfg := b.cfg
	hd, bs, nkv := cfg.HeadDim, b.blockSize, cfg.NumKVHeads
	group := cfg.NumHeads / nkv
	qDim, qkvDim := cfg.QDim(), cfg.QDim()+2*cfg.KVDim()
	scale := float32(1 / math.Sqrt(float64(hd)))
	table := sp.seq.BlockTable
	typ := b.kv.half
	nq := sp.n * group
	maxCtx := sp.seq.Pos + sp.n
	s.scores = grow(s.scores, nq*maxCtx)
	s.queries = grow(s.queries, nq*hd)
	s.out = grow(s.out, nq*hd)
	s.block = grow(s.block, bs*hd)
	// Query q = i·group + g is token i, head g of the group: its query vector is row q of
	// s.queries, its scores row q of s.scores (stride maxCtx), its output row q of s.out.
	for i := range sp.n {
		src := (sp.start+i)*qkvDim + kh*group*hd
		copy(s.queries[i*group*hd:(i+1)*group*hd], b.qkv[src:src+group*hd])
	}
	clear(s.out[:nq*hd])
	// seen is how many of the block's cnt positions from j0 query q sees (token i sees [0, Pos+i]).
	seen := func(q, j0, cnt int) int { return min(cnt, sp.seq.Pos+q/group+1-j0) }
	blockOff := func(j0 int) int { return (int(table[j0/bs])*nkv + kh) * bs * hd }
	prefetch := func(block []uint16) { prefetchAsm(&block[0], 2*len(block)) }
	// runs calls f for each run [q0, q1) of the queries that see c > 0 of the block's positions, c
	// the same for the whole run: every query for a block all of them see, one token's heads at
	// a time for the last.
	runs := func(j0, cnt int, f func(q0, q1, c int)) {
		q0 := max(0, j0-sp.seq.Pos) * group
		for q0 < nq {
			c := seen(q0, j0, cnt)
			q1 := q0 + group
			for q1 < nq && seen(q1, j0, cnt) == c {
				q1 += group
			}
			f(q0, q1, c)
			q0 = q1
		}
	}
	for j0 := 0; j0 < maxCtx; j0 += bs {
		cnt := min(bs, maxCtx-j0)
		keys := b.kv.keysHalf(l, blockOff(j0), cnt*hd)
		// The blocks are scattered, past the hardware prefetcher's reach: ask for the next one
		// (after the last key block, the first value block) while this one runs.
		if j0+bs < maxCtx {
			prefetch(b.kv.keysHalf(l, blockOff(j0+bs), min(bs, maxCtx-j0-bs)*hd))
		} else {
			prefetch(b.kv.valuesHalf(l, blockOff(0), min(bs, maxCtx)*hd))
		}
		runs(j0, cnt, func(q0, q1, c int) {
			dotKeys(s.queries[q0*hd:], hd, q1-q0, keys, hd, hd, c, s.scores[q0*maxCtx+j0:], maxCtx, typ)
		})
	}
	for q := range nq {
		softmaxScaled(s.scores[q*maxCtx:q*maxCtx+sp.seq.Pos+q/group+1], scale, true)
	}
	for j0 := 0; j0 < maxCtx; j0 += bs {
		cnt := min(bs, maxCtx-j0)
		values := b.kv.valuesHalf(l, blockOff(j0), cnt*hd)
		if j0+bs < maxCtx {
			prefetch(b.kv.valuesHalf(l, blockOff(j0+bs), min(bs, maxCtx-j0-bs)*hd))
		}
		// A run with a pass of three queries widens the block once into s.block for the float32
		// kernel (not a run of four: a group-4 model's decode).
		var wide []float32
		runs(j0, cnt, func(q0, q1, c int) {
			if widePays(q1-q0) && wide == nil {
				wide = s.block[:cnt*hd]
				linear.Widen(typ, values, wide)
			}
			axpyKeys(s.scores[q0*maxCtx+j0:], maxCtx, q1-q0, values, wide, hd, hd, c, s.out[q0*hd:], hd, typ)
		})
	}
	for i := range sp.n {
		dst := (sp.start+i)*qDim + kh*group*hd
		copy(b.attn[dst:dst+group*hd], s.out[i*group*hd:(i+1)*group*hd])
	}
}
