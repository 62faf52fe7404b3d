package detok

import (
	"fmt"
	"sync"
)

// Table holds the live Streams by request id. A Stream is opened when a
// request's first output arrives and closed when it finishes, stops or is
// aborted, so the table holds live requests only. Safe for concurrent use.
type Table struct {
	mu      sync.Mutex
	streams map[string]*Stream
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{streams: make(map[string]*Stream)} }

// Open registers a new stream for rid; a rid that is already open is an
// error (two requests must never share one stream).
func (t *Table) Open(rid string, dec TokenDecoder, stop []string) (*Stream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.streams[rid]; ok {
		return nil, fmt.Errorf("open detok stream: rid %q already open", rid)
	}
	s := NewStream(dec, stop)
	t.streams[rid] = s
	return s, nil
}

// Get returns the open stream for rid.
func (t *Table) Get(rid string) (*Stream, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.streams[rid]
	return s, ok
}

// Close frees rid's stream (finish or abort); closing an unknown rid is a
// no-op, since an abort may race with the finish. It reports whether a
// stream was open.
func (t *Table) Close(rid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.streams[rid]
	if ok {
		s.closed = true
	}
	delete(t.streams, rid)
	return ok
}

// Len is the number of open streams (a gauge for metrics).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.streams)
}
