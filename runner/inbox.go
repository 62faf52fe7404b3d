package runner

import (
	"context"
	"errors"
	"time"

	"github.com/llmserve/llmserve/ipc"
)

// inMsg is one decoded inbound message: a request or an abort.
type inMsg struct {
	req   *ipc.GenerateRequest
	abort *ipc.Abort
	hold  *ipc.HoldQuery
	at    time.Time // when it was read off the socket: a request's queue time starts here
}

// inboxSize bounds the decoded messages waiting for the step loop; the socket's own queue
// holds the rest.
const inboxSize = 1 << 16

// receive reads the request socket on its own goroutine, so that a request is acknowledged
// (counted in the load report's Received, and its prompt in Waiting) as soon as it arrives, not
// after the forward step that is running then. Dispatchers subtract acknowledged requests from
// their ledgers; a prompt acknowledgement keeps their picture of every rank exact within a
// round trip, which is what lets several tokenizer workers balance one burst.
func (r *Runner) receive(ctx context.Context) {
	defer close(r.inbox)
	arrived := false
	for ctx.Err() == nil {
		wait := 100 * time.Millisecond
		if arrived {
			wait = 0
		}
		frame, err := r.in.Recv(wait)
		if errors.Is(err, ipc.ErrTimeout) {
			if arrived {
				// The burst is read: acknowledge it in one report.
				r.ack()
				arrived = false
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, ipc.ErrClosed) {
				r.log.Error("request socket failed", "err", err)
			}
			return
		}
		typ, err := ipc.PeekType(frame)
		if err != nil {
			r.log.Warn("dropped bad frame", "err", err)
			continue
		}
		switch typ {
		case ipc.MsgGenerateRequest:
			gr := new(ipc.GenerateRequest)
			if err := gr.Decode(frame); err != nil {
				r.log.Warn("dropped bad request", "err", err)
				continue
			}
			r.load.arrived(gr.Owner, len(gr.InputIDs))
			arrived = true
			select {
			case r.inbox <- inMsg{req: gr, at: time.Now()}:
			case <-ctx.Done():
				return
			}
		case ipc.MsgAbort:
			ab := new(ipc.Abort)
			if err := ab.Decode(frame); err != nil {
				r.log.Warn("dropped bad abort", "err", err)
				continue
			}
			select {
			case r.inbox <- inMsg{abort: ab}:
			case <-ctx.Done():
				return
			}
		case ipc.MsgHoldQuery:
			q := new(ipc.HoldQuery)
			if err := q.Decode(frame); err != nil {
				r.log.Warn("dropped bad hold query", "err", err)
				continue
			}
			select {
			case r.inbox <- inMsg{hold: q}:
			case <-ctx.Done():
				return
			}
		default:
			r.log.Warn("dropped unexpected message", "type", typ)
		}
	}
}

// ack sends a load report (an empty batch) carrying the counts just received.
func (r *Runner) ack() { r.emitHeartbeat() }
