package cpu

import (
	"math"

	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/internal/parallel"
)

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
// Long chunks (prefill) run as matrix products and short ones (decodes) as dot products; either
// way the items are spread over the worker goroutines, each item's products, softmax included,
// on its own worker (gemm's serial entry points: no nested parallelism).
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

// attendDirect handles a short chunk (typically one decode token) with dot products straight
// over the cache blocks, a block's rows at a time. Each block is read (and widened, from a 16-bit
// cache) once for all the query heads that share its KV head.
func (b *Backend) attendDirect(l int, sp seqSpan, kh int, s *attnScratch) {
	cfg := b.cfg
	hd, bs, nkv := cfg.HeadDim, b.blockSize, cfg.NumKVHeads
	group := cfg.NumHeads / nkv
	qDim, qkvDim := cfg.QDim(), cfg.QDim()+2*cfg.KVDim()
	scale := float32(1 / math.Sqrt(float64(hd)))
	table := sp.seq.BlockTable
	simd := b.simd && hd%8 == 0
	maxCtx := sp.seq.Pos + sp.n
	s.scores = grow(s.scores, group*maxCtx)
	s.block = grow(s.block, bs*hd)
	for i := range sp.n {
		r := sp.start + i
		ctxLen := sp.seq.Pos + i + 1
		// Head g of the group keeps its scores at [g·maxCtx, g·maxCtx+ctxLen).
		scores := func(g int) []float32 { return s.scores[g*maxCtx : g*maxCtx+ctxLen] }
		query := func(g int) []float32 {
			qh := kh*group + g
			return b.qkv[r*qkvDim+qh*hd : r*qkvDim+(qh+1)*hd]
		}
		output := func(g int) []float32 {
			qh := kh*group + g
			return b.attn[r*qDim+qh*hd : r*qDim+(qh+1)*hd]
		}
		for j0 := 0; j0 < ctxLen; j0 += bs {
			cnt := min(bs, ctxLen-j0)
			off := (int(table[j0/bs])*nkv + kh) * bs * hd
			keys := b.kv.keys(l, off, cnt*hd, s.block)
			for g := range group {
				dotRows(query(g), keys, hd, scores(g)[j0:j0+cnt], simd)
			}
		}
		for g := range group {
			softmaxScaled(scores(g), scale)
			clear(output(g))
		}
		for j0 := 0; j0 < ctxLen; j0 += bs {
			cnt := min(bs, ctxLen-j0)
			off := (int(table[j0/bs])*nkv + kh) * bs * hd
			values := b.kv.values(l, off, cnt*hd, s.block)
			for g := range group {
				axpyRows(scores(g)[j0:j0+cnt], values, hd, output(g), simd)
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
	s.keys = grow(s.keys, ctxLen*hd)
	s.values = grow(s.values, ctxLen*hd)
	s.queries = grow(s.queries, tile*group*hd)
	s.out = grow(s.out, tile*group*hd)
	s.scores = grow(s.scores, tile*group*ctxLen)
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
	gemm.MatMulNTSerial(rows, ctxLen, hd, s.queries, hd, s.keys, hd, s.scores, ctxLen, false)
	for r := range rows {
		row := s.scores[r*ctxLen : (r+1)*ctxLen]
		valid := row[:sp.seq.Pos+i0+r/group+1]
		softmaxScaled(valid, scale)
		clear(row[len(valid):])
	}
	gemm.MatMulNNSerial(rows, hd, ctxLen, s.scores, ctxLen, s.values, hd, s.out, hd, false)
	for i := i0; i < i1; i++ {
		dst := (sp.start+i)*qDim + kh*span
		copy(b.attn[dst:dst+span], s.out[(i-i0)*span:(i-i0+1)*span])
	}
}
