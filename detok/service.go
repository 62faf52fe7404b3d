package detok

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/llmserve/llmserve/ipc"
	"github.com/llmserve/llmserve/tokenizer"
)

// Detokenizer is detokd's step function: token-id batches in, per-worker text batches out. It
// keeps one Stream per live request and frees it when the request finishes. Pure: no sockets.
type Detokenizer struct {
	tok     *tokenizer.Tokenizer
	table   *Table
	workers int
	out     []ipc.TextBatch // per worker, reused between steps
}

// NewDetokenizer makes a detokenizer for outputs owned by numWorkers tokenizer workers.
func NewDetokenizer(tok *tokenizer.Tokenizer, numWorkers int) *Detokenizer {
	return &Detokenizer{tok: tok, table: NewTable(), workers: numWorkers, out: make([]ipc.TextBatch, numWorkers)}
}

// Live is the number of requests with detokenization state.
func (d *Detokenizer) Live() int { return d.table.Len() }

// Step turns one rank's batch into a text batch for every worker: the items each worker owns,
// and the rank's load for all of them (so loads reach every dispatcher, heartbeats included).
// The returned batches are valid until the next Step.
func (d *Detokenizer) Step(in *ipc.TokenBatch) ([]ipc.TextBatch, error) {
	for w := range d.out {
		d.out[w].Items = d.out[w].Items[:0]
		d.out[w].Loads = append(d.out[w].Loads[:0], ipc.RankLoad{Rank: in.Rank, Seq: in.Seq, Load: in.Load})
	}
	var errs []error
	for i := range in.Items {
		it := &in.Items[i]
		if int(it.Owner) >= d.workers {
			errs = append(errs, fmt.Errorf("request %s: owner %d out of range (%d workers)", it.RID, it.Owner, d.workers))
			continue
		}
		text := ""
		if !it.NoText {
			st, ok := d.table.Get(it.RID)
			if !ok {
				var err error
				if st, err = d.table.Open(it.RID, d.tok.NewDecoder(it.SkipSpecialTokens), it.StopStrings); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			text, _, _ = st.Push(it.NewIDs, it.Finished)
		}
		if it.Finished {
			d.table.Close(it.RID)
		}
		out := &d.out[it.Owner]
		out.Items = append(out.Items, ipc.TextItem{TokenItem: *it, Text: text})
	}
	return d.out, errors.Join(errs...)
}

// Service runs a Detokenizer between its sockets: it binds the detok endpoint and connects to
// every worker's output endpoint.
type Service struct {
	det   *Detokenizer
	in    ipc.Receiver
	out   []ipc.Sender
	log   *slog.Logger
	frame []byte
}

// NewService opens detokd's sockets in runDir.
func NewService(tr ipc.Transport, runDir string, tok *tokenizer.Tokenizer, numWorkers int, log *slog.Logger) (*Service, error) {
	in, err := tr.Pull(ipc.DetokEndpoint(runDir), true, ipc.WithRecvHWM(100000))
	if err != nil {
		return nil, fmt.Errorf("detokd: bind: %w", err)
	}
	s := &Service{det: NewDetokenizer(tok, numWorkers), in: in, log: log}
	for w := 0; w < numWorkers; w++ {
		o, err := tr.Push(ipc.WorkerEndpoint(runDir, w), false, ipc.WithSendHWM(100000), ipc.WithSendTimeout(time.Second))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("detokd: connect to worker %d: %w", w, err)
		}
		s.out = append(s.out, o)
	}
	return s, nil
}

// Run processes batches until the input socket is closed.
func (s *Service) Run() error {
	var tb ipc.TokenBatch
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
		if err := tb.Decode(frame); err != nil {
			s.log.Warn("dropped bad frame", "err", err)
			continue
		}
		outs, err := s.det.Step(&tb)
		if err != nil {
			s.log.Warn("bad items", "err", err)
		}
		for w := range outs {
			s.frame = outs[w].Append(s.frame[:0])
			if err := s.out[w].Send(s.frame); err != nil {
				s.log.Warn("worker not reachable; its items are dropped", "worker", w, "items", len(outs[w].Items), "err", err)
			}
		}
	}
}

// Live is the number of requests with detokenization state.
func (s *Service) Live() int { return s.det.Live() }

// Close closes the sockets; Run returns.
func (s *Service) Close() {
	if s.in != nil {
		s.in.Close()
	}
	for _, o := range s.out {
		o.Close()
	}
}
