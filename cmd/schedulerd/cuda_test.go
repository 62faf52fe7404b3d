package main

import (
	"testing"

	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/backend/cuda"
)

// --batch-dependent reaches each backend as its own tuning: the CPU's flag, and for cuda devices
// cuBLASLt for decode rows from cuda.BatchDependentDecodeRows on; without it a cuda device keeps
// the backend's defaults (nil).
func TestBatchDependentTuning(t *testing.T) {
	on := cpuFlags{BatchDependent: true}
	for _, d := range []string{"cuda", "cuda:0", "cuda:3"} {
		tu, ok := on.tuning(d).(*cuda.Tuning)
		if !ok || tu.LtDecodeRows != cuda.BatchDependentDecodeRows {
			t.Errorf("%s --batch-dependent: tuning %#v", d, on.tuning(d))
		}
		if got := (&cpuFlags{}).tuning(d); got != nil {
			t.Errorf("%s without --batch-dependent: tuning %#v, want nil", d, got)
		}
	}
	if tu, ok := on.tuning("cpu").(*cpu.Tuning); !ok || !tu.BatchDependent {
		t.Errorf("cpu --batch-dependent: tuning %#v", on.tuning("cpu"))
	}
	if got := on.tuning("cudax"); got != nil {
		t.Errorf("unknown device cudax: tuning %#v, want nil", got)
	}
}
