package metrics

import (
	"strings"
	"testing"
)

// TestGaugeFamilyFunc: a family's series and label values are whatever its function returns at
// each scrape, under one HELP/TYPE header.
func TestGaugeFamilyFunc(t *testing.T) {
	r := NewRegistry()
	var samples []Sample
	r.NewGaugeFamilyFunc("llm_waiting_by_priority", "Waiting.", func() []Sample { return samples })
	scrape := func() string {
		var b strings.Builder
		r.WriteText(&b)
		return b.String()
	}
	if out := scrape(); !strings.Contains(out, "# TYPE llm_waiting_by_priority gauge") || strings.Contains(out, "llm_waiting_by_priority{") {
		t.Fatalf("empty family:\n%s", out)
	}
	samples = []Sample{{Labels{{"priority", "-1"}}, 2}, {Labels{{"priority", "other"}}, 5}}
	out := scrape()
	for _, want := range []string{`llm_waiting_by_priority{priority="-1"} 2`, `llm_waiting_by_priority{priority="other"} 5`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "# TYPE llm_waiting_by_priority") != 1 {
		t.Errorf("the family's header is not written once:\n%s", out)
	}
}
