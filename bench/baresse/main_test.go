package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestRunRejectsBadFlags(t *testing.T) {
	if err := run([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if err := run([]string{"-sequence", "affine:1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-sequence") {
		t.Errorf("bad sequence: %v", err)
	}
	if err := run([]string{"-token-interval", "-1s"}, io.Discard); err == nil {
		t.Errorf("negative interval accepted")
	}
	if err := run([]string{"-addr", "127.0.0.1:-5"}, io.Discard); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("bad addr: %v", err)
	}
}
