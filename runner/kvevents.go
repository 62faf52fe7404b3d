package runner

import (
	"time"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/scheduler"
)

// KVEventSink takes a rank's KV event batches (ipc.KVEventPublisher); Publish must not block.
type KVEventSink interface {
	Publish(b *ipc.KVEventBatch) bool
}

// publishKV hands a step's prefix-cache changes to the KV event sink. The events are the
// step's own (the scheduler does not reuse them), so only their wire form is built here; the
// encoding and sending happen on the publisher's goroutine.
func (r *Runner) publishKV(events []scheduler.KVEvent, now time.Time) {
	if r.cfg.KVEvents == nil || len(events) == 0 {
		return
	}
	b := &ipc.KVEventBatch{Time: float64(now.UnixNano()) / 1e9, DPRank: r.cfg.Rank, Events: make([]ipc.KVEvent, len(events))}
	for i, e := range events {
		b.Events[i] = ipc.KVEvent{Kind: kvKind(e.Kind), Hashes: e.Hashes, Parent: e.Parent, HasParent: e.HasParent,
			Tokens: e.Tokens, BlockSize: r.cfg.KVBlockSize}
	}
	r.cfg.KVEvents.Publish(b)
}

func kvKind(k scheduler.KVEventKind) ipc.KVEventKind {
	switch k {
	case scheduler.KVBlockStored:
		return ipc.KVBlockStored
	case scheduler.KVBlockRemoved:
		return ipc.KVBlockRemoved
	}
	return ipc.KVAllBlocksCleared
}
