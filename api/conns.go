package api

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// ConnLimiter is a listener that keeps the connections it has accepted and not yet closed at
// most Max, so a flood of idle clients cannot take every file descriptor and leave none for
// new clients (or for the worker's own sockets). At the bound, a new connection is admitted by
// closing the one idle the longest (accepted and silent, or kept alive between requests); when
// none is idle the new one is refused. Install Track as the http.Server's ConnState.
type ConnLimiter struct {
	net.Listener
	// Max is the most connections open at once.
	Max int
	// SendBuffer, when > 0, is each accepted TCP connection's socket send buffer (SO_SNDBUF).
	// It bounds what a client may leave unread before a write blocks: with the kernel's
	// autotuning the buffer grows to megabytes, so a client that stops reading a long stream
	// would never make a write wait, and the write timeout that cuts it (and frees its KV at
	// the rank) would never fire.
	SendBuffer int

	mu    sync.Mutex
	conns map[net.Conn]*list.Element // every open connection; its element in idle, or nil
	idle  list.List                  // of net.Conn, idle the longest first
	shed  atomic.Uint64              // idle connections closed to make room
	refus atomic.Uint64              // new connections refused (all busy)
}

// DefaultSendBuffer is the send buffer of a client connection (ConnLimiter.SendBuffer): enough
// for a burst of large chunks (Linux doubles it for its own bookkeeping), small enough that a
// client that stops reading makes the stream's writes wait within a few hundred KiB, so the
// write timeout cuts it.
const DefaultSendBuffer = 128 << 10

// NewConnLimiter limits the connections accepted from ln to max.
func NewConnLimiter(ln net.Listener, max int) *ConnLimiter {
	return &ConnLimiter{Listener: ln, Max: max, conns: map[net.Conn]*list.Element{}}
}

// Accept returns the next connection, closing the longest-idle one if that is needed to stay
// within Max, or refusing new ones while every open connection is busy.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim net.Conn
		if len(l.conns) >= l.Max {
			if e := l.idle.Front(); e != nil {
				victim = l.idle.Remove(e).(net.Conn)
				delete(l.conns, victim)
			}
		}
		admit := len(l.conns) < l.Max
		if admit {
			l.conns[c] = l.idle.PushBack(c) // silent until it sends a request
		}
		l.mu.Unlock()
		if victim != nil {
			l.shed.Add(1)
			victim.Close()
		}
		if admit {
			if tc, ok := c.(*net.TCPConn); ok && l.SendBuffer > 0 {
				_ = tc.SetWriteBuffer(l.SendBuffer) // best effort: the default only delays the cut
			}
			return c, nil
		}
		l.refus.Add(1)
		c.Close()
	}
}

// Track follows a connection's state (http.Server.ConnState): busy while a request is read or
// served, idle between requests, gone when closed or hijacked.
func (l *ConnLimiter) Track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if !ok {
		return // shed already, or not accepted here
	}
	switch state {
	case http.StateActive:
		if e != nil {
			l.idle.Remove(e)
			l.conns[c] = nil
		}
	case http.StateIdle:
		if e == nil {
			l.conns[c] = l.idle.PushBack(c)
		}
	case http.StateClosed, http.StateHijacked:
		if e != nil {
			l.idle.Remove(e)
		}
		delete(l.conns, c)
	}
}

// Open is the number of open connections.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Shed is the number of idle connections closed to admit new ones; Refused the number of new
// connections refused because every open one was busy.
func (l *ConnLimiter) Shed() uint64    { return l.shed.Load() }
func (l *ConnLimiter) Refused() uint64 { return l.refus.Load() }
