package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// DrainReport is what -check-drained saw on /get_load after the run.
type DrainReport struct {
	Drained  bool    `json:"drained"`
	Seconds  float64 `json:"seconds"` // from the end of the run until idle (or until giving up)
	Polls    int     `json:"polls"`
	Running  int64   `json:"running"`
	Waiting  int64   `json:"waiting"`
	InFlight *int64  `json:"in_flight,omitempty"` // the answering worker's own count, when reported
	Err      string  `json:"error,omitempty"`     // the last poll's error, if it failed
}

func (d DrainReport) String() string {
	s := fmt.Sprintf("drained=%v after %.2fs (%d polls): running %d waiting %d", d.Drained, d.Seconds, d.Polls, d.Running, d.Waiting)
	if d.InFlight != nil {
		s += fmt.Sprintf(" in_flight %d", *d.InFlight)
	}
	if d.Err != "" {
		s += " error: " + d.Err
	}
	return s
}

// loadReport is the part of /get_load we read: the engine's worker reports totals over all
// ranks; a plain server may report running and waiting at the top level.
type loadReport struct {
	Running  *int64 `json:"running"`
	Waiting  *int64 `json:"waiting"`
	InFlight *int64 `json:"in_flight"`
	Totals   *struct {
		Running int64 `json:"running"`
		Waiting int64 `json:"waiting"`
	} `json:"totals"`
}

// checkDrained polls GET base/get_load every 50 ms until running+waiting is 0 (and in_flight,
// where reported) or timeout passes.
func checkDrained(ctx context.Context, c *http.Client, base string, timeout time.Duration) DrainReport {
	start := time.Now()
	var d DrainReport
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		d.Polls++
		err := pollLoad(ctx, c, base, &d)
		d.Err = ""
		if err != nil {
			d.Err = err.Error()
		}
		d.Seconds = time.Since(start).Seconds()
		if err == nil && d.Running+d.Waiting == 0 && (d.InFlight == nil || *d.InFlight == 0) {
			d.Drained = true
			return d
		}
		if time.Since(start) >= timeout {
			return d
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			d.Err = ctx.Err().Error()
			return d
		}
	}
}

func pollLoad(ctx context.Context, c *http.Client, base string, d *DrainReport) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/get_load", nil)
	if err != nil {
		return fmt.Errorf("get_load request: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("get %s/get_load: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s/get_load: status %s", base, resp.Status)
	}
	var lr loadReport
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&lr); err != nil {
		return fmt.Errorf("decode %s/get_load: %w", base, err)
	}
	switch {
	case lr.Totals != nil:
		d.Running, d.Waiting = lr.Totals.Running, lr.Totals.Waiting
	case lr.Running != nil && lr.Waiting != nil:
		d.Running, d.Waiting = *lr.Running, *lr.Waiting
	default:
		return fmt.Errorf("%s/get_load has neither totals nor running/waiting", base)
	}
	d.InFlight = lr.InFlight
	return nil
}
