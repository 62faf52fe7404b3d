package runflags

import (
	"runtime/debug"
	"testing"
)

// TestSetStreamingGC: without GOGC in the environment the streaming processes collect at
// StreamingGCPercent; with it, the operator's value stays.
func TestSetStreamingGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	t.Setenv("GOGC", "")
	SetStreamingGC()
	if got := debug.SetGCPercent(150); got != StreamingGCPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, StreamingGCPercent)
	}
	t.Setenv("GOGC", "150")
	SetStreamingGC()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Errorf("GOGC=150: GC percent %d, want the environment's 150", got)
	}
}
