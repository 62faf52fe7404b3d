package api

import (
	"encoding/json"
	"fmt"
	"math"
)

// parsePriority reads the priority field (vLLM's and SGLang's): an integer within int32, lower
// runs first under --scheduling-policy priority. Absent or null is 0.
func parsePriority(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) {
		return 0, badRequest("priority", fmt.Sprintf("must be an integer, got %s", clip(string(raw))))
	}
	if f < math.MinInt32 || f > math.MaxInt32 {
		return 0, badRequest("priority", fmt.Sprintf("must be in [%d, %d], got %s", math.MinInt32, math.MaxInt32, raw))
	}
	return int(f), nil
}
