package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

func TestPlanLayout(t *testing.T) {
	b := &backend.Batch{Seqs: []backend.Seq{
		{Tokens: []int32{5, 6, 7}, Pos: 14, BlockTable: []int32{3, 9}, Logits: true}, // positions 14..16
		{Tokens: []int32{8}, Pos: 600, BlockTable: make([]int32, 38), Logits: true},
		{Tokens: []int32{1, 2}, Pos: 0, BlockTable: []int32{4}, AllLogits: true},
		{Tokens: []int32{3}, Pos: 2, BlockTable: []int32{5}},
	}}
	for i := range b.Seqs[1].BlockTable {
		b.Seqs[1].BlockTable[i] = int32(10 + i%5)
	}
	p, err := planBatch(b, 100, 16, 20, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.rows != 7 || p.real != 7 || p.seqs != 4 {
		t.Fatalf("rows %d real %d seqs %d", p.rows, p.real, p.seqs)
	}
	// decode rows (seqs 1 and 3) lead, then the prefill chunks' rows, each in batch order
	if !slices.Equal(p.pos, []int32{600, 2, 14, 15, 16, 0, 1}) || !slices.Equal(p.rowSeq, []int32{1, 3, 0, 0, 0, 2, 2}) {
		t.Fatalf("pos %v rowSeq %v", p.pos, p.rowSeq)
	}
	if !slices.Equal(p.decodeRows, []int32{0, 1}) || p.decodeLead != 2 || p.maxParts != (601+dev.PartitionTokens-1)/dev.PartitionTokens {
		t.Fatalf("decode rows %v (lead %d), parts %d (context 601 in partitions of %d)", p.decodeRows, p.decodeLead, p.maxParts, dev.PartitionTokens)
	}
	if !slices.Equal(p.tiles, []int32{2, 3, 5, 2}) {
		t.Fatalf("tiles %v", p.tiles)
	}
	if !slices.Equal(p.logitRows, []int32{0, 4, 5, 6}) || p.logitDecodeLead != 1 || !slices.Equal(p.seqLogits, []int{1, 0, 2, 0}) || !slices.Equal(p.seqLogitN, []int{1, 1, 2, 0}) {
		t.Fatalf("logit rows %v (decode lead %d), seq starts %v counts %v", p.logitRows, p.logitDecodeLead, p.seqLogits, p.seqLogitN)
	}
	// table rows are stride wide; entries past a sequence's need are the dummy block (20)
	if got := p.tables[:3]; !slices.Equal(got, []int32{3, 9, 20}) || p.tables[39] != 20 || len(p.tables) != 4*40 {
		t.Fatalf("table row 0 starts %v, ends %d, %d entries", got, p.tables[39], len(p.tables))
	}
}

// A Generated Seq of several tokens (a speculative step) is laid out with the decode rows, each
// of its rows a one-token decode, so its rows equal the decodes' whatever rides beside them.
func TestPlanGenerated(t *testing.T) {
	b := &backend.Batch{Seqs: []backend.Seq{
		{Tokens: []int32{1, 2, 3, 4}, Pos: 0, BlockTable: []int32{0}, Logits: true},
		{Tokens: []int32{5, 6, 7}, Pos: 510, BlockTable: make([]int32, 33), AllLogits: true, Generated: true},
		{Tokens: []int32{8}, Pos: 3, BlockTable: []int32{2}, Logits: true, Generated: true},
	}}
	for i := range b.Seqs[1].BlockTable {
		b.Seqs[1].BlockTable[i] = 1
	}
	p, err := planBatch(b, 10, 16, 3, 40, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.rowSeq, []int32{1, 1, 1, 2, 0, 0, 0, 0}) || !slices.Equal(p.pos, []int32{510, 511, 512, 3, 0, 1, 2, 3}) {
		t.Fatalf("rowSeq %v pos %v", p.rowSeq, p.pos)
	}
	if !slices.Equal(p.decodeRows, []int32{0, 1, 2, 3}) || p.decodeLead != 4 || p.maxParts != (513+dev.PartitionTokens-1)/dev.PartitionTokens || !slices.Equal(p.tiles, []int32{4, 4}) {
		t.Fatalf("decode rows %v (lead %d), parts %d, tiles %v", p.decodeRows, p.decodeLead, p.maxParts, p.tiles)
	}
	if !slices.Equal(p.logitRows, []int32{0, 1, 2, 3, 7}) || p.logitDecodeLead != 4 || !slices.Equal(p.seqLogits, []int{4, 0, 3}) || !slices.Equal(p.seqLogitN, []int{1, 3, 1}) {
		t.Fatalf("logit rows %v (decode lead %d), seq starts %v counts %v", p.logitRows, p.logitDecodeLead, p.seqLogits, p.seqLogitN)
	}
	if decodeOnly(&backend.Batch{Seqs: b.Seqs[1:2]}) {
		t.Fatal("a Generated Seq of three tokens counted as a graph-replayable decode step")
	}
}

func TestPlanLongChunkTiles(t *testing.T) {
	b := &backend.Batch{Seqs: []backend.Seq{{Tokens: make([]int32, 40), BlockTable: []int32{0, 1, 2}, Logits: true}}}
	p, err := planBatch(b, 10, 16, 3, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.tiles, []int32{0, 16, 16, 16, 32, 8}) || len(p.decodeRows) != 0 {
		t.Fatalf("tiles %v decode %v", p.tiles, p.decodeRows)
	}
}

func TestPlanPadding(t *testing.T) {
	b := &backend.Batch{Seqs: []backend.Seq{
		{Tokens: []int32{4}, Pos: 3, BlockTable: []int32{1}, Logits: true},
		{Tokens: []int32{5}, Pos: 9, BlockTable: []int32{0}, Logits: true},
		{Tokens: []int32{6}, Pos: 0, BlockTable: []int32{2}, Logits: true},
	}}
	if !decodeOnly(b) {
		t.Fatal("a decode batch is not decodeOnly")
	}
	n := bucketFor(len(b.Seqs))
	if n != 4 {
		t.Fatalf("bucket for 3 is %d", n)
	}
	p, err := planBatch(b, 10, 16, 3, 2, n)
	if err != nil {
		t.Fatal(err)
	}
	if p.rows != 4 || p.real != 3 || p.seqs != 4 {
		t.Fatalf("rows %d real %d seqs %d", p.rows, p.real, p.seqs)
	}
	// the padding row decodes token 0 at position 0 on a table row of dummy blocks (3)
	if p.ids[3] != 0 || p.pos[3] != 0 || p.rowSeq[3] != 3 || !slices.Equal(p.tables[6:8], []int32{3, 3}) {
		t.Fatalf("padding row: id %d pos %d seq %d table %v", p.ids[3], p.pos[3], p.rowSeq[3], p.tables[6:8])
	}
	if !slices.Equal(p.decodeRows, []int32{0, 1, 2, 3}) || !slices.Equal(p.logitRows, []int32{0, 1, 2, 3}) || p.decodeLead != 4 || p.logitDecodeLead != 4 {
		t.Fatalf("decode rows %v logit rows %v", p.decodeRows, p.logitRows)
	}
	b.Seqs[1].Tokens = []int32{5, 6}
	if decodeOnly(b) {
		t.Fatal("a prefill chunk counted as decode")
	}
}

func TestPlanRefusals(t *testing.T) {
	for _, c := range []struct {
		seq  backend.Seq
		want string
	}{
		{backend.Seq{}, "no tokens"},
		{backend.Seq{Tokens: []int32{1}, Pos: -1, BlockTable: []int32{0}}, "negative position"},
		{backend.Seq{Tokens: []int32{10}, BlockTable: []int32{0}}, "outside vocabulary"},
		{backend.Seq{Tokens: []int32{1}, Pos: 16}, "need 2 blocks"},
		{backend.Seq{Tokens: []int32{1}, BlockTable: []int32{3}}, "pool has 3 blocks"},
		{backend.Seq{Tokens: []int32{1}, Pos: 40, BlockTable: []int32{0, 1, 2}}, "more than the 2"},
	} {
		_, err := planBatch(&backend.Batch{Seqs: []backend.Seq{c.seq}}, 10, 16, 3, 2, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.seq, err, c.want)
		}
	}
}

func TestBuckets(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, 9: 16, 17: 24, 250: 256, 256: 256, 257: 0} {
		if got := bucketFor(n); got != want {
			t.Errorf("bucketFor(%d) = %d, want %d", n, got, want)
		}
	}
}
