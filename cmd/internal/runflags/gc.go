package runflags

import (
	"os"
	"runtime/debug"
)

// StreamingGCPercent is the garbage-collection target (GOGC) of the processes that stream
// tokens, tokenizerd's workers and detokd, when the environment sets none. Their live heap is
// small (connections, per-request state) while their garbage comes per token (received
// frames, decoded text, chunks), so at Go's default of 100 they collect every few megabytes: at
// 4,096 streams on 2 cores, collection and allocation were ~20% of a worker's CPU and ~16% of
// detokd's. At 400 the heap may grow to five times what is live between collections: a worker
// holding 4,096 streams peaked at ~700 MiB resident instead of ~360 MiB, for ~3% less CPU per
// token and ~5% more tokens/s (bench/streambench, C=4,096, 2 cores). schedulerd keeps Go's
// default: its heap may hold weights quantized at load, and its garbage per token is small.
const StreamingGCPercent = 400

// SetStreamingGC sets the process's GC target to StreamingGCPercent unless GOGC is set in the
// environment (an operator's GOGC wins).
func SetStreamingGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(StreamingGCPercent)
	}
}
