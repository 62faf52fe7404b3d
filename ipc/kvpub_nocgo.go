//go:build !cgo

package ipc

import (
	"errors"
	"log/slog"
)

// KVPublisherConfig configures a rank's KV event publisher (see the cgo build).
type KVPublisherConfig struct {
	Endpoint, ReplayEndpoint, Topic string
	QueueSize, ReplayBuffer, HWM    int
	Log                             *slog.Logger
}

// KVEventPublisher is not available without cgo.
type KVEventPublisher struct{}

// NewKVEventPublisher fails: the pure-Go transport has no PUB/ROUTER sockets here.
func NewKVEventPublisher(KVPublisherConfig) (*KVEventPublisher, error) {
	return nil, errors.New("KV events (--kv-events-endpoint) need the cgo build with libzmq (CGO_ENABLED=1); this binary has only the pure-Go transport")
}

// Publish is never reached (NewKVEventPublisher fails).
func (*KVEventPublisher) Publish(*KVEventBatch) bool { return false }

// Dropped is 0.
func (*KVEventPublisher) Dropped() uint64 { return 0 }

// Sent is 0.
func (*KVEventPublisher) Sent() uint64 { return 0 }

// Close does nothing.
func (*KVEventPublisher) Close() error { return nil }
