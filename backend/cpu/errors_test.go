package cpu

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/model"
)

func TestForwardRejectsBadBatches(t *testing.T) {
	m := loadFixture(t, "qwen3", "config.json")
	b := newTestBackend(t, m, backend.Options{NumBlocks: 4, BlockSize: 4})
	for _, tc := range []struct {
		name    string
		seq     backend.Seq
		wantErr string
	}{
		{"no tokens", backend.Seq{BlockTable: []int32{0}}, "no tokens"},
		{"negative pos", backend.Seq{Tokens: []int32{1}, Pos: -1, BlockTable: []int32{0}}, "negative position"},
		{"token out of vocab", backend.Seq{Tokens: []int32{512}, BlockTable: []int32{0}}, "outside vocabulary"},
		{"negative token", backend.Seq{Tokens: []int32{-1}, BlockTable: []int32{0}}, "outside vocabulary"},
		{"short block table", backend.Seq{Tokens: []int32{1, 2, 3}, Pos: 2, BlockTable: []int32{0}}, "need 2 blocks"},
		{"block out of pool", backend.Seq{Tokens: []int32{1}, Pos: 4, BlockTable: []int32{0, 4}}, "pool has 4"},
	} {
		_, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{
			{Tokens: []int32{1}, BlockTable: []int32{1}, Logits: true}, tc.seq,
		}})
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: got %v, want error containing %q", tc.name, err, tc.wantErr)
		}
	}
	if out, err := b.Forward(context.Background(), &backend.Batch{}); err != nil || len(out) != 0 {
		t.Errorf("empty batch: %v, %v", out, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Forward(ctx, &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{0}}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Forward(context.Background(), &backend.Batch{Seqs: []backend.Seq{{Tokens: []int32{1}, BlockTable: []int32{0}}}}); err == nil {
		t.Error("Forward after Close succeeded")
	}
}

func TestNewOptions(t *testing.T) {
	m := loadFixture(t, "llama", "config.json")
	// 2 layers × 2 (K, V) × 2 kv heads × 16 positions × 16 dims × 4 bytes = 8 KiB per block.
	b, err := New(m, backend.Options{KVCacheBytes: 80 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if b.NumBlocks() != 10 || b.BlockSize() != DefaultBlockSize || b.VocabSize() != 512 {
		t.Errorf("blocks %d, block size %d, vocab %d", b.NumBlocks(), b.BlockSize(), b.VocabSize())
	}
	if _, err := New(m, backend.Options{KVCacheBytes: 100}); err == nil || !strings.Contains(err.Error(), "holds no block") {
		t.Errorf("tiny budget: %v", err)
	}
	if _, err := New(m, backend.Options{}); err == nil {
		t.Error("no KV size accepted")
	}
	if _, err := New(m, backend.Options{NumBlocks: -1}); err == nil {
		t.Error("negative NumBlocks accepted")
	}
	if _, err := New(&model.Model{}, backend.Options{NumBlocks: 1}); err == nil {
		t.Error("empty model accepted")
	}
}
