package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histSub is the number of buckets per power of two: values are kept to within 1/64 (about 1.6%).
const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits + 1) * histSub
)

// histogram counts durations (in microseconds) in log-linear buckets with atomic adds, so
// thousands of streams record into one without a lock and memory stays fixed however long the run.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	total  atomic.Uint64
	sumUS  atomic.Uint64
	maxUS  atomic.Uint64
}

func bucketOf(us uint64) int {
	if us < histSub {
		return int(us)
	}
	shift := bits.Len64(us) - histSubBits - 1
	return (shift+1)*histSub + int(us>>shift) - histSub
}

// bucketLow is the smallest value that falls in bucket b.
func bucketLow(b int) uint64 {
	if b < histSub {
		return uint64(b)
	}
	shift := b/histSub - 1
	return uint64(b%histSub+histSub) << shift
}

// add records n observations of d.
func (h *histogram) add(d time.Duration, n uint64) {
	if n == 0 {
		return
	}
	us := uint64(max(d.Microseconds(), 0))
	h.counts[bucketOf(us)].Add(n)
	h.total.Add(n)
	h.sumUS.Add(us * n)
	for {
		m := h.maxUS.Load()
		if us <= m || h.maxUS.CompareAndSwap(m, us) {
			break
		}
	}
}

// quantile returns the value below which a fraction q of the observations fall, as the midpoint
// of its bucket; 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	total := h.total.Load()
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	if rank >= total {
		rank = total - 1
	}
	var seen uint64
	for b := range h.counts {
		seen += h.counts[b].Load()
		if seen > rank {
			lo, hi := bucketLow(b), bucketLow(b+1)
			mid := min((lo+hi)/2, h.maxUS.Load())
			return time.Duration(mid) * time.Microsecond
		}
	}
	return time.Duration(h.maxUS.Load()) * time.Microsecond
}

// Latency is the summary of one histogram, in milliseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (h *histogram) summary() Latency {
	n := h.total.Load()
	l := Latency{Count: n, Max: float64(h.maxUS.Load()) / 1000}
	if n == 0 {
		return l
	}
	l.Mean = float64(h.sumUS.Load()) / float64(n) / 1000
	l.P50, l.P90, l.P99 = ms(h.quantile(0.50)), ms(h.quantile(0.90)), ms(h.quantile(0.99))
	return l
}
