// Package testmain is the TestMain that test packages share: model loading and engine steps log
// progress through slog, which would bury test and benchmark output, so those lines are
// dropped unless the tests run with -v.
package testmain

import (
	"flag"
	"log/slog"
	"os"
	"testing"
)

// Run quiets the default slog logger unless -v, runs the tests and exits with their status.
// A package uses it as: func TestMain(m *testing.M) { testmain.Run(m) }
func Run(m *testing.M) {
	flag.Parse()
	if !testing.Verbose() {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	os.Exit(m.Run())
}
