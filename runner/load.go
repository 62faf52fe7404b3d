package runner

import (
	"sync"
	"time"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/scheduler"
)

// loadState is what the rank's next report says and when it last sent one. The receive
// goroutine counts arrivals, the step loop publishes the scheduler's load and hands queued
// requests over, and whoever sends a batch stamps it; no sockets, so tests drive it directly.
type loadState struct {
	mu   sync.Mutex // guards every field below
	rank uint32
	seq  uint64 // of the last batch stamped; every batch and heartbeat takes the next
	// received and receivedTokens count, per worker, the requests (prompt tokens) read off the
	// socket, ever: the acknowledgements dispatchers subtract from their ledgers.
	received       []uint64
	receivedTokens []uint64
	// queued and queuedTokens are requests read that the step loop has not handed to the
	// scheduler yet; they are reported as waiting.
	queued       int
	queuedTokens int
	sched        scheduler.Load // the scheduler's last load
	lastSend     time.Time      // when the last batch was stamped
}

func newLoadState(rank, workers int) *loadState {
	return &loadState{rank: uint32(rank), received: make([]uint64, workers), receivedTokens: make([]uint64, workers)}
}

// arrived counts a request read off the socket from worker owner (unknown owners are only
// queued: their acknowledgement has no slot).
func (s *loadState) arrived(owner uint32, promptTokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(owner) < len(s.received) {
		s.received[owner]++
		s.receivedTokens[owner] += uint64(promptTokens)
	}
	s.queued++
	s.queuedTokens += promptTokens
}

// handed moves n queued requests (promptTokens in all) to the scheduler, whose load is now l,
// in one step, so a report in between never misses them.
func (s *loadState) handed(n, promptTokens int, l scheduler.Load) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queued -= n
	s.queuedTokens -= promptTokens
	s.sched = l
}

// publish records the scheduler's load after a step.
func (s *loadState) publish(l scheduler.Load) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sched = l
}

// stamp gives b the next sequence number and the current load with the process's Go runtime
// stats (read at most once a second, for the workers' /metrics), and, when frame is not nil,
// encodes b into it (reusing its buffer) under the same lock, so a frame's number and load
// are taken at one instant.
func (s *loadState) stamp(b *ipc.TokenBatch, frame *[]byte, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	b.Rank, b.Seq = s.rank, s.seq
	loadToWire(&b.Load, &s.sched, s.queued, s.queuedTokens, s.received, s.receivedTokens)
	b.Load.Go = ipc.GoStats(metrics.ReadGoRuntime())
	s.lastSend = now
	if frame != nil {
		*frame = b.Append((*frame)[:0])
	}
}

// quiet reports whether nothing has been stamped for at least period before now.
func (s *loadState) quiet(now time.Time, period time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.lastSend) >= period
}
