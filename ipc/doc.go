// Package ipc is the one way processes of the engine talk to each other: PUSH/PULL sockets
// (a Transport, backed by libzmq under cgo or by pure-Go go-zeromq otherwise) and the wire
// messages that travel over them (GenerateRequest, Abort, TokenBatch, TextBatch) with their
// versioned little-endian binary codec.
//
// Sockets never block forever: Send waits at most the send timeout for room in a bounded
// queue and Recv takes a timeout; both return ErrTimeout when the peer is gone or slow.
// Endpoints are "ipc://path" (under a private run directory, see RunDir) or "tcp://host:port".
//
// Every frame starts with WireVersion and a MsgType byte; Decode rejects anything else.
//
// KV-cache events (kvevents.go, kvpub.go) are the one outward-facing format: vLLM's msgpack
// EventBatch on a PUB socket with a replay ROUTER, for indexers outside the engine.
package ipc
