// Package ipc is the one way processes of the engine talk to each other: PUSH/PULL sockets
// (a Transport, backed by libzmq under cgo or by pure-Go go-zeromq otherwise) and the wire
// messages that travel over them (GenerateRequest, Abort, TokenBatch, TextBatch) with their
// versioned little-endian binary codec.
//
// Sockets never block forever: Send waits at most the send timeout for room in a bounded
// queue and Recv takes a timeout; both return ErrTimeout when the peer is gone or slow.
// Endpoints are "ipc://path" (under a private run directory, see RunDir) or "tcp://host:port".
// Topology says where each of an engine's sockets is: all ipc:// on one host, or tcp:// when
// ranks and detokd run on other hosts, where every socket is secured with CURVE (curve.go: the
// engine's keypair, a ZAP handler that admits only it, Probe for failing fast at start). The
// pure-Go transport has no CURVE and refuses tcp:// beyond loopback.
//
// Every frame starts with WireVersion and a MsgType byte; Decode rejects anything else.
//
// KV-cache events (kvevents.go, kvpub.go) are the one outward-facing format: vLLM's msgpack
// EventBatch on a PUB socket with a replay ROUTER, for indexers outside the engine.
package ipc
