package shard

import "fmt"

// Method is a data-parallel load-balancing policy.
type Method uint8

const (
	// RoundRobin cycles through the ranks that are up, ignoring load.
	RoundRobin Method = iota
	// ShortestQueue picks the rank with the fewest requests (running +
	// waiting as last reported, plus dispatches not yet acknowledged).
	ShortestQueue
	// MinimumTokens picks the rank with the fewest tokens (KV tokens used
	// plus queued prompt tokens as last reported, plus prompt tokens of
	// dispatches not yet acknowledged), relative to KV capacity when every
	// candidate reports one.
	MinimumTokens
	// CacheAware picks the rank this dispatcher already sent the longest prefix of the prompt
	// (so the rank's prefix cache likely holds it), unless that rank's load exceeds the
	// least-loaded rank's by more than a bound (WithCacheAwareBound); then, and for prompts
	// no rank has seen, it picks as ShortestQueue.
	CacheAware
)

var methodNames = [...]string{
	RoundRobin:    "round_robin",
	ShortestQueue: "shortest_queue",
	MinimumTokens: "minimum_tokens",
	CacheAware:    "cache_aware",
}

// ParseMethod parses a --load-balance-method value.
func ParseMethod(s string) (Method, error) {
	for m, name := range methodNames {
		if s == name {
			return Method(m), nil
		}
	}
	return 0, fmt.Errorf("unknown load-balance method %q (want one of %v)", s, methodNames)
}

// String returns the flag spelling of m.
func (m Method) String() string {
	if int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}
