package runflags

import (
	"strings"
	"testing"
)

// TestTopologyFromLeaderWorkerSet: under a LeaderWorkerSet the ranks' hosts are the worker pods'
// names, derived from the leader's address, and a pod's rank from its index.
func TestTopologyFromLeaderWorkerSet(t *testing.T) {
	keys := t.TempDir()
	t.Setenv("LWS_LEADER_ADDRESS", "llmserve-0.llmserve.prod")
	t.Setenv("LWS_GROUP_SIZE", "3")
	t.Setenv("LWS_WORKER_INDEX", "2")
	t.Setenv("CURVE_KEYS", keys)
	var c Config
	parse(t, &c, "--dp-size", "2")
	if _, err := c.Topology(t.TempDir()); err == nil || !strings.Contains(err.Error(), "curve.pub") {
		t.Fatalf("no keys on disk: err = %v", err)
	}
	c.CurveKeys = ""
	if _, err := c.Topology(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--curve-keys") || ExitStatus(err) != ExitConflict {
		t.Fatalf("no --curve-keys across hosts: err = %v (exit %d, want %d)", err, ExitStatus(err), ExitConflict)
	}
	hosts, err := c.RankHosts(2)
	if err != nil || strings.Join(hosts, ",") != "llmserve-0-1.llmserve.prod,llmserve-0-2.llmserve.prod" {
		t.Fatalf("rank hosts = %v, %v", hosts, err)
	}
	if _, err := c.RankHosts(3); err == nil || !strings.Contains(err.Error(), "LWS_GROUP_SIZE=3") {
		t.Fatalf("dp size 3 in a group of 3: err = %v", err)
	}
	if r, ok, err := LWSRank(); r != 1 || !ok || err != nil {
		t.Fatalf("LWSRank = %d %v %v", r, ok, err)
	}
	c.RankAddresses = "10.0.0.2, 10.0.0.3"
	if hosts, _ := c.RankHosts(2); strings.Join(hosts, ",") != "10.0.0.2,10.0.0.3" {
		t.Fatalf("--rank-addresses: %v", hosts)
	}
}
