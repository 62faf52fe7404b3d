package shard

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/llmserve/llmserve/internal/mmap"
)

// Ledger is the dispatch ledger that the tokenizer workers of one engine share: for every
// (worker, rank) pair, the requests and prompt tokens that worker has sent that rank. It lives in
// a memory-mapped file in the run directory, so a worker sees the other workers' dispatches the
// moment they happen rather than one load report later; ranks acknowledge them per worker
// (Load.ReceivedAll), so the pending load of a rank is exact however many workers dispatch.
//
// Each worker writes only its own cells; everyone reads all of them with atomic loads.
type Ledger struct {
	mem            []byte
	workers, ranks int
}

const (
	ledgerMagic      = "LLMLEDG1"
	ledgerHeaderSize = 16 // magic, workers uint32, ranks uint32
	ledgerCellSize   = 16 // sent, sentTokens
)

func ledgerSize(workers, ranks int) int {
	return ledgerHeaderSize + workers*ranks*ledgerCellSize
}

// CreateLedger writes a fresh, all-zero ledger for workers x ranks at path, replacing any
// ledger a previous run left there (its ranks are gone, and their counters with them). The
// tokenizerd supervisor calls it once, before it starts the workers.
func CreateLedger(path string, workers, ranks int) error {
	if workers < 1 || ranks < 1 {
		return fmt.Errorf("create dispatch ledger %s: %d workers x %d ranks", path, workers, ranks)
	}
	if err := mmap.CreateShared(path, ledgerSize(workers, ranks), ledgerMagic, uint32(workers), uint32(ranks)); err != nil {
		return fmt.Errorf("create dispatch ledger: %w", err)
	}
	return nil
}

// OpenLedger maps the ledger at path, which must have been created for workers x ranks.
func OpenLedger(path string, workers, ranks int) (*Ledger, error) {
	mem, err := mmap.OpenShared(path, ledgerSize(workers, ranks), ledgerMagic, uint32(workers), uint32(ranks))
	if err != nil {
		return nil, fmt.Errorf("open dispatch ledger %s for %d workers x %d ranks: %w", path, workers, ranks, err)
	}
	return &Ledger{mem: mem, workers: workers, ranks: ranks}, nil
}

// Close unmaps the ledger.
func (l *Ledger) Close() error {
	if l.mem == nil {
		return nil
	}
	err := syscall.Munmap(l.mem)
	l.mem = nil
	return err
}

// cell returns the counters of (worker, rank). The mapping is page-aligned and every offset a
// multiple of 8, so the counters are aligned for 64-bit atomics.
func (l *Ledger) cell(worker, rank int) (sent, tokens *uint64) {
	off := ledgerHeaderSize + (worker*l.ranks+rank)*ledgerCellSize
	return (*uint64)(unsafe.Pointer(&l.mem[off])), (*uint64)(unsafe.Pointer(&l.mem[off+8]))
}

// Add records one request of promptTokens sent by worker to rank.
func (l *Ledger) Add(worker, rank int, promptTokens uint64) {
	sent, tokens := l.cell(worker, rank)
	// Tokens first: a reader that sees the request also sees its tokens.
	atomic.AddUint64(tokens, promptTokens)
	atomic.AddUint64(sent, 1)
}

// Undo takes back one Add of promptTokens (a request that was never sent). The caller knows
// the cell holds at least that much: only worker writes it.
func (l *Ledger) Undo(worker, rank int, promptTokens uint64) {
	sent, tokens := l.cell(worker, rank)
	// Request first, the reverse of Add: a reader never sees a request without its tokens.
	atomic.AddUint64(sent, ^uint64(0))
	atomic.AddUint64(tokens, -promptTokens)
}

// Sent returns what worker has sent rank since the ledger was created or the cell reset.
func (l *Ledger) Sent(worker, rank int) (requests, promptTokens uint64) {
	sent, tokens := l.cell(worker, rank)
	return atomic.LoadUint64(sent), atomic.LoadUint64(tokens)
}

// Reset zeroes worker's cell for rank: the rank restarted, and its acknowledgements with it.
func (l *Ledger) Reset(worker, rank int) {
	sent, tokens := l.cell(worker, rank)
	atomic.StoreUint64(sent, 0)
	atomic.StoreUint64(tokens, 0)
}
