package scheduler

import (
	"flag"
	"log/slog"
	"os"
	"testing"
)

// TestMain keeps model loading's progress lines out of test and benchmark output unless -v.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	os.Exit(m.Run())
}
