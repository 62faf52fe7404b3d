package cuda

import (
	"testing"

	"github.com/llmserve/llmserve/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
