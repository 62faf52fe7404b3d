// Package testmain is the TestMain that packages whose code logs progress (model loading,
// scheduler steps) share: their log lines stay out of test and benchmark output unless -v.
package testmain

import (
	"flag"
	"log/slog"
	"os"
	"testing"
)

// Run parses the test flags, discards the default logger's output unless -v, and runs the
// tests. Call it as a package's TestMain: func TestMain(m *testing.M) { testmain.Run(m) }.
func Run(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	os.Exit(m.Run())
}
