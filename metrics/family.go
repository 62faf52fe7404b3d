package metrics

import (
	"fmt"
	"io"
)

// Sample is one series of a gauge family read at scrape time: its labels and its value.
type Sample struct {
	Labels Labels
	Value  float64
}

// GaugeFamilyFunc is a gauge whose series are read from a function at scrape time, label values
// included: for a breakdown whose values are known only while the engine runs (the priority
// values requests wait at). The function bounds how many series it returns.
type GaugeFamilyFunc struct {
	fn func() []Sample
}

// NewGaugeFamilyFunc registers a gauge family whose series fn returns at each scrape, in the
// order returned (none while fn returns none).
func (r *Registry) NewGaugeFamilyFunc(name, help string, fn func() []Sample) {
	r.add(name, help, kindGauge, &GaugeFamilyFunc{fn: fn})
}

func (g *GaugeFamilyFunc) labels() string { return "" }
func (g *GaugeFamilyFunc) write(w io.Writer, name string) {
	for _, s := range g.fn() {
		fmt.Fprintf(w, "%s%s %s\n", name, s.Labels.String(), fmtFloat(s.Value))
	}
}
