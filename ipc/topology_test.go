package ipc

import (
	"strings"
	"testing"
)

// TestTopology: each socket is bound on all of its host's interfaces by its reader and reached
// at its host's address by its writers; the ports follow the documented layout.
func TestTopology(t *testing.T) {
	local := LocalTopology("/run/x")
	if local.Remote() || local.Scheduler(1, false) != SchedulerEndpoint("/run/x", 1) || local.Worker(2, true) != WorkerEndpoint("/run/x", 2) ||
		local.Detok(false) != DetokEndpoint("/run/x") || local.Check(2) != nil {
		t.Fatalf("one-host topology: %+v", local)
	}
	k := &CurveKeys{Public: strings.Repeat("a", 40), Secret: strings.Repeat("b", 40)}
	top := &Topology{RunDir: "/run/x", LeaderHost: "lead.svc", RankHosts: []string{"10.0.0.2", "fd00::3"}, Port: 5600, Curve: k}
	for _, c := range []struct{ got, want string }{
		{top.Detok(true), "tcp://*:5600"},
		{top.Detok(false), "tcp://lead.svc:5600"},
		{top.Worker(2, false), "tcp://lead.svc:5603"},
		{top.Scheduler(0, true), "tcp://*:5857"},
		{top.Scheduler(1, false), "tcp://[fd00::3]:5858"},
	} {
		if c.got != c.want {
			t.Errorf("endpoint %s, want %s", c.got, c.want)
		}
	}
	if err := top.Check(2); err != nil {
		t.Fatal(err)
	}
	if len(top.Options()) != 1 {
		t.Fatal("CURVE keys not among the socket options")
	}
	for _, c := range []struct {
		top  Topology
		dp   int
		want string
	}{
		{Topology{LeaderHost: "h", Port: 5600}, 1, "--curve-keys"},
		{Topology{RankHosts: []string{"a"}, Port: 5600, Curve: k}, 1, "--leader-address"},
		{Topology{LeaderHost: "h", RankHosts: []string{"a"}, Port: 5600, Curve: k}, 2, "1 rank addresses for --dp-size 2"},
		{Topology{LeaderHost: "h", Port: 65300, Curve: k}, 1, "--zmq-port"},
		{Topology{LeaderHost: "tcp://h:1", Port: 5600, Curve: k}, 1, "without scheme or port"},
	} {
		if err := c.top.Check(c.dp); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.top, err, c.want)
		}
	}
}
