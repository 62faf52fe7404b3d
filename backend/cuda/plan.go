package cuda

import (
	"fmt"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// tileRows is the most rows of one sequence an attn_prefill tile holds.
const tileRows = 16

// plan is one step's inputs, laid out for the kernels. It is pure data: planBatch builds it
// from a Batch without touching the device.
type plan struct {
	// rows is the number of token rows (after padding), seqs the number of block-table rows.
	rows, seqs int
	// real is the number of rows that carry the batch's tokens; rows beyond it are padding.
	real int
	// ids, pos and rowSeq are per row: the token, its position and its block-table row.
	ids, pos, rowSeq []int32
	// tables is [seqs][stride] block ids, entries past a sequence's need set to the dummy block.
	tables []int32
	// decodeRows lists the rows attended by attn_decode (sequences of one token), with
	// maxParts the most split-KV partitions any of them needs; tiles lists {first row, rows}
	// of attn_prefill's tiles (longer chunks).
	decodeRows []int32
	maxParts   int
	tiles      []int32
	// logitRows lists the rows whose logits are computed (decode rows' first, then the others,
	// each in batch order); seqLogits[i] is the first index into logitRows of Seq i and
	// seqLogitN[i] how many (0 for none).
	logitRows            []int32
	seqLogits, seqLogitN []int
	// maxCtx is the longest context (position + 1) of any row.
	maxCtx int
	// decodeLead is the number of leading rows that are decode rows (rows [0, decodeLead) are
	// the decodeRows), logitDecodeLead the number of leading logitRows that are.
	decodeLead, logitDecodeLead int
}

// decodeSeq reports a sequence whose rows are computed as one-token decodes (attn_decode and
// the decode GEMMs): a decode, or a Generated Seq of several tokens (a speculative step: the
// last sampled token and its drafts), whose rows must equal the decodes'.
func decodeSeq(s *backend.Seq) bool { return len(s.Tokens) == 1 || s.Generated }

// addSeq lays out Seq i's rows after the rows placed so far.
func (p *plan) addSeq(i int, s *backend.Seq) {
	first := len(p.ids)
	for j, t := range s.Tokens {
		p.ids = append(p.ids, t)
		p.pos = append(p.pos, int32(s.Pos+j))
		p.rowSeq = append(p.rowSeq, int32(i))
	}
	end := s.Pos + len(s.Tokens)
	if decodeSeq(s) {
		for j := range s.Tokens {
			p.decodeRows = append(p.decodeRows, int32(first+j))
		}
		p.maxParts = max(p.maxParts, (end+dev.PartitionTokens-1)/dev.PartitionTokens)
	} else {
		for t := 0; t < len(s.Tokens); t += tileRows {
			p.tiles = append(p.tiles, int32(first+t), int32(min(tileRows, len(s.Tokens)-t)))
		}
	}
	switch {
	case s.AllLogits:
		p.seqLogits[i], p.seqLogitN[i] = len(p.logitRows), len(s.Tokens)
		for j := range s.Tokens {
			p.logitRows = append(p.logitRows, int32(first+j))
		}
	case s.Logits:
		p.seqLogits[i], p.seqLogitN[i] = len(p.logitRows), 1
		p.logitRows = append(p.logitRows, int32(first+len(s.Tokens)-1))
	}
	p.maxCtx = max(p.maxCtx, end)
}

// planBatch validates b against a pool of numBlocks blocks of bs positions (the dummy block is
// block numBlocks) and a table stride, and lays it out. pad > len(rows) adds decode rows of
// token 0 at position 0 on their own table row of dummy blocks, up to pad rows (graph buckets).
func planBatch(b *backend.Batch, vocab, bs, numBlocks, stride, pad int) (*plan, error) {
	p := &plan{seqLogits: make([]int, len(b.Seqs)), seqLogitN: make([]int, len(b.Seqs))}
	dummy := int32(numBlocks)
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if len(s.Tokens) == 0 {
			return nil, fmt.Errorf("seq %d: no tokens", i)
		}
		if s.Pos < 0 {
			return nil, fmt.Errorf("seq %d: negative position %d", i, s.Pos)
		}
		for _, t := range s.Tokens {
			if t < 0 || int(t) >= vocab {
				return nil, fmt.Errorf("seq %d: token id %d outside vocabulary of %d", i, t, vocab)
			}
		}
		end := s.Pos + len(s.Tokens)
		need := (end + bs - 1) / bs
		if need > stride {
			return nil, fmt.Errorf("seq %d: positions [0,%d) need %d blocks, more than the %d a sequence may hold", i, end, need, stride)
		}
		if len(s.BlockTable) < need {
			return nil, fmt.Errorf("seq %d: positions [0,%d) need %d blocks of %d, block table has %d", i, end, need, bs, len(s.BlockTable))
		}
		row := make([]int32, stride)
		for j := range row {
			row[j] = dummy
		}
		for j, blk := range s.BlockTable[:need] {
			if blk < 0 || int(blk) >= numBlocks {
				return nil, fmt.Errorf("seq %d: block table entry %d is %d, pool has %d blocks", i, j, blk, numBlocks)
			}
			row[j] = blk
		}
		p.tables = append(p.tables, row...)
	}
	// Decode rows come first, then the prefill chunks' rows, each group in batch order: the
	// projections run the decode GEMMs over the leading rows and the tiled GEMMs over the rest,
	// so a decode row's arithmetic never depends on what else is in the step.
	for pass := range 2 {
		for i := range b.Seqs {
			s := &b.Seqs[i]
			if decodeSeq(s) != (pass == 0) {
				continue
			}
			p.addSeq(i, s)
		}
		if pass == 0 {
			p.decodeLead, p.logitDecodeLead = len(p.ids), len(p.logitRows)
		}
	}
	p.real, p.seqs = len(p.ids), len(b.Seqs)
	if pad > p.real {
		// One table row of dummy blocks serves every padding row: they write their K and V to
		// the dummy block and read only it.
		row := make([]int32, stride)
		for j := range row {
			row[j] = dummy
		}
		p.tables = append(p.tables, row...)
		for r := p.real; r < pad; r++ {
			p.ids = append(p.ids, 0)
			p.pos = append(p.pos, 0)
			p.rowSeq = append(p.rowSeq, int32(p.seqs))
			p.decodeRows = append(p.decodeRows, int32(r))
			p.logitRows = append(p.logitRows, int32(r))
		}
		p.seqs++
		p.maxParts = max(p.maxParts, 1)
		p.decodeLead, p.logitDecodeLead = len(p.ids), len(p.logitRows)
	}
	p.rows = len(p.ids)
	return p, nil
}

// decodeOnly reports a step whose every sequence decodes one token and wants its logits: the
// steps graphs replay.
func decodeOnly(b *backend.Batch) bool {
	for i := range b.Seqs {
		s := &b.Seqs[i]
		if len(s.Tokens) != 1 || !s.Logits || s.AllLogits {
			return false
		}
	}
	return len(b.Seqs) > 0
}
