package cpu

import (
	"testing"

	"github.com/llmserve/llmserve/internal/testmain"
)

// TestMain keeps model loading's progress lines out of test and benchmark output unless -v.
func TestMain(m *testing.M) { testmain.Run(m) }
