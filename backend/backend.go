// Package backend defines the forward-pass interface that every device implementation (cpu,
// cuda, and the benchmark-only replay runner) provides to the scheduler.
//
// The scheduler owns the KV-cache bookkeeping (which blocks belong to which sequence, prefix
// sharing); a backend owns the KV memory itself and reads and writes it through the block tables
// the scheduler hands it. A block holds BlockSize() consecutive token positions of every layer.
package backend

import "context"

// Seq is one sequence's share of a batched forward step: a prefill chunk of several tokens, or
// the single token being decoded.
type Seq struct {
	// Tokens are the ids to run this step.
	Tokens []int32
	// Pos is the position of Tokens[0]; the KV of positions [0, Pos) is already in the cache.
	Pos int
	// BlockTable lists, in order, the KV blocks holding positions [0, Pos+len(Tokens)).
	BlockTable []int32
	// Logits asks for the logits at the last token of this chunk.
	Logits bool
	// AllLogits asks for the logits at every token of this chunk (prompt logprobs): the Seq's
	// row then holds len(Tokens) rows of VocabSize floats back to back, the last token's last.
	// A backend that cannot compute them fails the Forward.
	AllLogits bool
	// Generated marks Tokens as generated ones: a decode's token, or a speculative decoding's
	// last token and its drafts. A backend computes each such token as a one-token decode of
	// the sequence would, so its row does not depend on how many tokens ride in the step.
	Generated bool
}

// Batch is the work of one forward step: prefill chunks and decodes of any number of sequences.
type Batch struct {
	Seqs []Seq
}

// Backend runs a model's forward pass on one device.
type Backend interface {
	// Forward runs one step for every sequence in b, writing each token's K and V into the
	// sequence's blocks, and returns one logits row (VocabSize floats) per Seq with Logits set
	// (len(Tokens) rows back to back with AllLogits), nil for the others, in batch order. The rows are valid until the next call to Forward.
	Forward(ctx context.Context, b *Batch) ([][]float32, error)
	// NumBlocks is the number of KV-cache blocks in the pool.
	NumBlocks() int
	// BlockSize is the number of token positions one block holds.
	BlockSize() int
	// VocabSize is the length of a logits row.
	VocabSize() int
	// Close releases the device memory.
	Close() error
}

// DeviceArgmax is an optional capability of a Backend: the greedy choice from a row of the last
// Forward, taken where the row lives (a device kernel; the replay runner knows its winner), so
// the scheduler does not read a greedy request's row on the host. It must equal the host scan:
// the first index of the largest logit, NaN and -Inf never chosen.
type DeviceArgmax interface {
	// Argmax returns that index for row i of the slice the last Forward returned, or -1 when
	// row i is nil or holds no finite maximum (the caller then scans the row itself).
	Argmax(i int) int32
}
