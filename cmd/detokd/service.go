package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/llmserve/llmserve/detok"
	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/tokenizer"
)

// service runs a detok.Detokenizer between its sockets: it binds the detok endpoint and
// connects to every worker's output endpoint. Run and Close may be called from different
// goroutines; everything else is Run's.
type service struct {
	det   *detok.Detokenizer // the pure step: token batches in, per-worker text batches out
	in    ipc.Receiver       // the ranks' token batches (bound: ipc.DetokEndpoint)
	out   []ipc.Sender       // per worker: its text batches (ipc.WorkerEndpoint)
	log   *slog.Logger
	frame []byte // encode buffer, reused between sends
	// epoch names this process on every batch it sends (ipc.TextBatch.Epoch): random and
	// nonzero, so a worker tells a restarted detokd from the one before.
	epoch uint64
	// ids maps a live request's rid to its client request id while debug lines are on.
	ids map[string]string
}

// newService opens detokd's sockets where top places them.
func newService(tr ipc.Transport, top *ipc.Topology, tok *tokenizer.Tokenizer, numWorkers int, log *slog.Logger) (*service, error) {
	in, err := tr.Pull(top.Detok(true), true, top.Options(ipc.WithRecvHWM(100000))...)
	if err != nil {
		return nil, fmt.Errorf("detokd: bind: %w", err)
	}
	s := &service{det: detok.NewDetokenizer(tok, numWorkers), in: in, log: log, epoch: rand.Uint64() | 1}
	for w := 0; w < numWorkers; w++ {
		o, err := tr.Push(top.Worker(w, false), false, top.Options(ipc.WithSendHWM(100000), ipc.WithSendTimeout(time.Second))...)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("detokd: connect to worker %d: %w", w, err)
		}
		s.out = append(s.out, o)
	}
	return s, nil
}

// maxCoalesce bounds how many queued frames one output round takes: enough to merge the
// small steps of a rank that runs ahead, few enough that a round's first tokens are not held
// back for long.
const maxCoalesce = 64

// Run processes batches until the input socket is closed. Each round takes one frame, waiting
// for it, and then the frames already queued behind it (at most maxCoalesce in all), merges
// every request's items of the round into one (detok.Coalescer), detokenizes the merged items
// and sends each worker one batch: when the ranks run ahead of detokd, a request costs one
// detokenization and one item to its worker per round, not one per step; when they do not,
// nothing waits.
func (s *service) Run() error {
	var tb ipc.TokenBatch
	co := detok.NewCoalescer()
	for {
		frame, err := s.in.Recv(-1)
		if errors.Is(err, ipc.ErrTimeout) {
			continue
		}
		if err != nil {
			if errors.Is(err, ipc.ErrClosed) {
				return nil
			}
			return err
		}
		added := s.add(&tb, co, frame)
		for n := 1; n < maxCoalesce; n++ {
			if frame, err = s.in.Recv(0); err != nil {
				break // nothing more queued (a closed socket is seen by the next Recv)
			}
			added = s.add(&tb, co, frame) || added
		}
		if added {
			s.send(co)
		}
	}
}

// add decodes one frame and merges its items and load into co. It reports false for a frame it
// dropped.
func (s *service) add(tb *ipc.TokenBatch, co *detok.Coalescer, frame []byte) bool {
	if err := tb.Decode(frame); err != nil {
		s.log.Warn("dropped bad frame", "err", err)
		return false
	}
	s.logItems(tb)
	co.Add(tb)
	return true
}

// send detokenizes the round's merged items, sends each worker its batch, and empties co.
func (s *service) send(co *detok.Coalescer) {
	outs, err := s.det.StepMerged(co.Items(), co.Loads())
	if err != nil {
		s.log.Warn("bad items", "err", err)
	}
	// detokd's own Go runtime stats ride along for the workers' /metrics (read at most once a
	// second).
	goStats := ipc.GoStats(metrics.ReadGoRuntime())
	for w := range outs {
		outs[w].Detok, outs[w].Epoch = goStats, s.epoch
		s.frame = outs[w].Append(s.frame[:0])
		if err := s.out[w].Send(s.frame); err != nil {
			s.log.Warn("worker not reachable; its items are dropped", "worker", w, "items", len(outs[w].Items), "err", err)
		}
	}
	co.Reset()
}

// logItems logs, at debug, each request's finish under the client's request id (which rides on
// a request's first item only, so it is kept until the finish while debug lines are on).
func (s *service) logItems(tb *ipc.TokenBatch) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	if s.ids == nil {
		s.ids = map[string]string{}
	}
	for i := range tb.Items {
		it := &tb.Items[i]
		id := it.RequestID
		if id == "" {
			id = s.ids[it.RID]
		}
		if !it.Finished {
			if it.RequestID != "" {
				s.ids[it.RID] = id
			}
			continue
		}
		delete(s.ids, it.RID)
		s.log.Debug("request finished", "request_id", id, "rid", it.RID, "rank", tb.Rank, "worker", it.Owner,
			"finish_reason", it.FinishReason.String(), "completion_tokens", it.CompletionTokens)
	}
}

// Close closes the sockets; Run returns.
func (s *service) Close() {
	if s.in != nil {
		s.in.Close()
	}
	for _, o := range s.out {
		o.Close()
	}
}
