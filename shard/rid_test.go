package shard

import (
	"regexp"
	"testing"
)

func TestNewRIDUniqueAndWellFormed(t *testing.T) {
	format := regexp.MustCompile(`^w3-[0-9a-f]{32}$`)
	seen := make(map[string]bool)
	for range 10000 {
		rid := NewRID(3)
		if !format.MatchString(rid) {
			t.Fatalf("rid %q not of the form w3-<32 hex>", rid)
		}
		if seen[rid] {
			t.Fatalf("duplicate rid %q", rid)
		}
		seen[rid] = true
	}
}
