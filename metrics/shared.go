package metrics

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/llmserve/llmserve/internal/mmap"
)

// Shared is the metrics store the tokenizer workers of one engine share: a memory-mapped file in
// the run directory with one slot of cells per worker. Each worker adds only to its own slot;
// whichever worker answers a scrape sums every slot, so every scrape shows the whole engine and a
// counter never goes down between two scrapes that land on different workers. A worker that
// restarts maps the same slot and counts on from where it stopped.
//
// A slot begins with a header: the layout fingerprint (a hash of every series registered so far,
// in order) and the number of cells in use. Slots whose fingerprint differs from the reader's
// (a worker of another build, or one still registering) are left out of the sums.
type Shared struct {
	// mem is the whole mapped file; slots[i] views worker i's cells (after its header).
	mem   []byte
	slots [][]atomic.Uint64
	index int
	// mu guards used, fp and sealed: registrations advance used and fp until Seal.
	mu     sync.Mutex
	used   int
	fp     uint64
	sealed bool
}

const (
	sharedMagic      = "LLMMETR1"
	sharedHeaderSize = 16            // magic, workers uint32, slot cells uint32
	slotHeaderCells  = 2             // fingerprint, cells in use
	slotCells        = 8192          // cells per worker, header included: 64 KiB
	slotBytes        = slotCells * 8 //
)

func sharedSize(workers int) int { return sharedHeaderSize + workers*slotBytes }

// CreateShared writes a fresh, all-zero store for workers at path, replacing any store a
// previous run left there. The tokenizerd supervisor calls it once, before it starts the workers.
func CreateShared(path string, workers int) error {
	if workers < 1 {
		return fmt.Errorf("create metrics store %s: %d workers", path, workers)
	}
	if err := mmap.CreateShared(path, sharedSize(workers), sharedMagic, uint32(workers), slotCells); err != nil {
		return fmt.Errorf("create metrics store: %w", err)
	}
	return nil
}

// OpenShared maps the store at path, created for workers, as worker index.
func OpenShared(path string, workers, index int) (*Shared, error) {
	if index < 0 || index >= workers {
		return nil, fmt.Errorf("open metrics store %s: worker %d of %d", path, index, workers)
	}
	mem, err := mmap.OpenShared(path, sharedSize(workers), sharedMagic, uint32(workers), slotCells)
	if err != nil {
		return nil, fmt.Errorf("open metrics store %s for %d workers: %w", path, workers, err)
	}
	s := &Shared{mem: mem, index: index, slots: make([][]atomic.Uint64, workers)}
	for i := range workers {
		// The mapping is page-aligned and slots are multiples of 8 bytes, so each cell is an
		// aligned 64-bit word that atomic operations may use.
		s.slots[i] = unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[sharedHeaderSize+i*slotBytes])), slotCells)
	}
	// A restarted worker registers the same series again into the same cells and counts on; its
	// header keeps the previous life's fingerprint until Seal, so its counts stay in the sums.
	s.used = slotHeaderCells
	s.fp = fnv.New64a().Sum64()
	return s, nil
}

// alloc reserves n cells of this worker's slot for the series described by desc.
func (s *Shared) alloc(desc string, n int) (own []atomic.Uint64, all func() [][]atomic.Uint64) {
	start := s.reserve(desc, n)
	own = s.slots[s.index][start : start+n : start+n]
	return own, func() [][]atomic.Uint64 { return s.matching(start, n) }
}

// reserve takes the next n cells of every slot's layout for desc and returns the first.
func (s *Shared) reserve(desc string, n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sealed {
		// The layout is published: a later series would change it under the other workers.
		panic(fmt.Sprintf("metrics: %s registered after the shared store was sealed", desc))
	}
	if s.used+n > slotCells {
		panic(fmt.Sprintf("metrics: store slot full registering %s (%d cells)", desc, slotCells))
	}
	start := s.used
	s.used += n
	h := fnv.New64a()
	var prev [8]byte
	binary.LittleEndian.PutUint64(prev[:], s.fp)
	h.Write(prev[:])
	h.Write([]byte(desc))
	s.fp = h.Sum64()
	return start
}

// Seal publishes this worker's layout (its fingerprint and cell count) once every series is
// registered; until then other workers leave its slot out of their sums.
func (s *Shared) Seal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sealed = true
	mine := s.slots[s.index]
	mine[1].Store(uint64(s.used))
	mine[0].Store(s.fp)
}

// matching returns cells [start, start+n) of this worker's slot and of every slot published
// with this worker's layout.
func (s *Shared) matching(start, n int) [][]atomic.Uint64 {
	s.mu.Lock()
	fp := s.fp
	s.mu.Unlock()
	out := make([][]atomic.Uint64, 0, len(s.slots))
	for i, slot := range s.slots {
		if i != s.index && (slot[0].Load() != fp || slot[1].Load() < uint64(start+n)) {
			continue
		}
		out = append(out, slot[start:start+n:start+n])
	}
	return out
}

// allocIndexed is alloc whose reader also says which worker each slot is.
func (s *Shared) allocIndexed(desc string, n int) (own []atomic.Uint64, all func() []indexedCells) {
	start := s.reserve(desc, n)
	own = s.slots[s.index][start : start+n : start+n]
	return own, func() []indexedCells { return s.matchingIndexed(start, n) }
}

// matchingIndexed is matching with each slot's worker index.
func (s *Shared) matchingIndexed(start, n int) []indexedCells {
	s.mu.Lock()
	fp := s.fp
	s.mu.Unlock()
	var out []indexedCells
	for i, slot := range s.slots {
		if i != s.index && (slot[0].Load() != fp || slot[1].Load() < uint64(start+n)) {
			continue
		}
		out = append(out, indexedCells{i, slot[start : start+n : start+n]})
	}
	return out
}

// Close unmaps the store.
func (s *Shared) Close() error {
	if s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem = nil
	return err
}
