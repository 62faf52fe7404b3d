//go:build cgo

package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// KVPublisherConfig configures a rank's KV event publisher.
type KVPublisherConfig struct {
	// Endpoint is the PUB socket's (already offset for the rank; see KVEventsEndpointForRank).
	Endpoint string
	// ReplayEndpoint, when set, is the ROUTER socket's that answers replay requests.
	ReplayEndpoint string
	// Topic is the first frame of every message (subscribers filter on its prefix).
	Topic string
	// QueueSize bounds the batches waiting to be encoded and sent (default 10000); Publish
	// drops a batch, never waits, when it is full.
	QueueSize int
	// ReplayBuffer is how many past batches the replay socket can resend (default 10000).
	ReplayBuffer int
	// HWM bounds the messages the PUB socket queues per subscriber (default 100000); a slower
	// subscriber loses messages (and can ask the replay socket for them).
	HWM int
	Log *slog.Logger
}

// KVEventPublisher sends a rank's KV event batches. Publish never blocks the caller (the step
// loop): one goroutine owns both sockets, encodes, sends and answers replay requests.
type KVEventPublisher struct {
	cfg     KVPublisherConfig
	q       chan *KVEventBatch
	dropped atomic.Uint64 // batches Publish found no room for
	sent    atomic.Uint64 // batches sent (the next sequence number)
	done    chan struct{}
	close   sync.Once
	pub     *zmq.Socket // the goroutine's
	replay  *zmq.Socket // the goroutine's; nil without a replay endpoint
}

// NewKVEventPublisher opens the sockets and starts the publishing goroutine.
func NewKVEventPublisher(cfg KVPublisherConfig) (*KVEventPublisher, error) {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.ReplayBuffer <= 0 {
		cfg.ReplayBuffer = 10000
	}
	if cfg.HWM <= 0 {
		cfg.HWM = 100000
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p := &KVEventPublisher{cfg: cfg, q: make(chan *KVEventBatch, cfg.QueueSize), done: make(chan struct{})}
	var err error
	if p.pub, err = kvSocket(zmq.PUB, cfg.Endpoint, KVEventsBinds(cfg.Endpoint), cfg.HWM); err != nil {
		return nil, err
	}
	if cfg.ReplayEndpoint != "" {
		if p.replay, err = kvSocket(zmq.ROUTER, cfg.ReplayEndpoint, true, cfg.HWM); err != nil {
			p.pub.Close()
			return nil, err
		}
	}
	go p.run()
	return p, nil
}

func kvSocket(typ zmq.Type, endpoint string, bind bool, hwm int) (*zmq.Socket, error) {
	network, addr, err := splitEndpoint(endpoint)
	if err != nil {
		return nil, fmt.Errorf("KV events: %w", err)
	}
	s, err := zmq.NewSocket(typ)
	if err != nil {
		return nil, fmt.Errorf("KV events: socket: %w", err)
	}
	if err = s.SetLinger(0); err == nil {
		err = s.SetSndhwm(hwm)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("KV events: socket options: %w", err)
	}
	if bind {
		if network == "unix" {
			err = claimIPCPath(addr)
		}
		if err == nil {
			err = s.Bind(endpoint)
		}
	} else {
		err = s.Connect(endpoint)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("KV events: %s %s: %w", map[bool]string{true: "bind", false: "connect"}[bind], endpoint, err)
	}
	return s, nil
}

// Publish queues b (which the publisher then owns) and reports whether there was room.
func (p *KVEventPublisher) Publish(b *KVEventBatch) bool {
	select {
	case p.q <- b:
		return true
	default:
		if n := p.dropped.Add(1); n&(n-1) == 0 { // log the 1st, 2nd, 4th, 8th... drop
			p.cfg.Log.Warn("KV events queue full: batch dropped (subscribers' view of the cache is now incomplete)",
				"dropped", n, "queue", p.cfg.QueueSize)
		}
		return false
	}
}

// Dropped counts the batches Publish dropped; Sent the batches sent.
func (p *KVEventPublisher) Dropped() uint64 { return p.dropped.Load() }

// Sent counts the batches sent so far.
func (p *KVEventPublisher) Sent() uint64 { return p.sent.Load() }

// Close sends what is queued (waiting at most 2 s), then closes the sockets. Publish must not
// be called after Close.
func (p *KVEventPublisher) Close() error {
	p.close.Do(func() { close(p.q) })
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		return errors.New("KV events: publisher did not stop within 2 s")
	}
	return nil
}

// replayed is one sent batch kept for replay.
type replayed struct {
	seq     uint64
	payload []byte
}

func (p *KVEventPublisher) run() {
	defer close(p.done)
	defer func() {
		p.pub.Close()
		if p.replay != nil {
			p.replay.Close()
		}
	}()
	ring := make([]replayed, 0, min(p.cfg.ReplayBuffer, 1024))
	head := 0 // ring's oldest entry once it is full
	topic := []byte(p.cfg.Topic)
	var seqb [8]byte
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var b *KVEventBatch
		select {
		case x, ok := <-p.q:
			if !ok {
				return
			}
			b = x
		case <-tick.C:
		}
		if b != nil {
			seq := p.sent.Load()
			payload := b.AppendMsgpack(nil)
			binary.BigEndian.PutUint64(seqb[:], seq)
			if _, err := p.pub.SendMessageDontwait(topic, seqb[:], payload); err != nil && !isEAGAIN(err) {
				p.cfg.Log.Warn("KV events: send failed", "seq", seq, "err", err)
			}
			p.sent.Add(1)
			if len(ring) < p.cfg.ReplayBuffer {
				ring = append(ring, replayed{seq, payload})
			} else {
				ring[head] = replayed{seq, payload}
				head = (head + 1) % len(ring)
			}
		}
		if p.replay != nil {
			p.serveReplay(ring, head)
		}
	}
}

// serveReplay answers the replay requests waiting, without blocking.
func (p *KVEventPublisher) serveReplay(ring []replayed, head int) {
	for {
		msg, err := p.replay.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			return // EAGAIN: none waiting
		}
		if len(msg) != 3 || len(msg[1]) != 0 || len(msg[2]) != 8 {
			p.cfg.Log.Warn("KV events: malformed replay request ignored", "frames", len(msg))
			continue
		}
		id, from := msg[0], binary.BigEndian.Uint64(msg[2])
		var seqb [8]byte
		for i := range ring {
			r := ring[(head+i)%len(ring)]
			if r.seq < from {
				continue
			}
			binary.BigEndian.PutUint64(seqb[:], r.seq)
			if _, err := p.replay.SendMessageDontwait(id, []byte{}, seqb[:], r.payload); err != nil {
				break // the client is gone or not reading: it can ask again
			}
		}
		binary.BigEndian.PutUint64(seqb[:], ^uint64(0)) // -1: the end
		_, _ = p.replay.SendMessageDontwait(id, []byte{}, seqb[:], []byte{})
	}
}
