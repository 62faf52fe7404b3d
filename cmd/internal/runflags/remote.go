package runflags

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmserve/llmserve/ipc"
	"github.com/urfave/cli/v3"
)

// Remote is where the engine's processes find each other across hosts (see ipc.Topology).
// Empty addresses keep every socket ipc:// in the run directory.
type Remote struct {
	// LeaderAddress is the host of the tokenizer workers and detokd (LeaderWorkerSet's
	// LWS_LEADER_ADDRESS).
	LeaderAddress string
	// RankAddresses lists each rank's host, comma-separated; empty under a LeaderWorkerSet
	// derives them from LWS_LEADER_ADDRESS and LWS_GROUP_SIZE (see RankHosts).
	RankAddresses string
	// ZMQPort is the first tcp port of the engine's sockets.
	ZMQPort int
	// CurveKeys is the directory of the engine's CURVE keypair (`schedulerd keygen DIR`).
	CurveKeys string
	// PeerTimeout bounds how long a rank or detokd waits at start for its peers to answer.
	PeerTimeout time.Duration
}

func (r *Remote) flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "leader-address", Destination: &r.LeaderAddress, Sources: cli.EnvVars("LEADER_ADDRESS", "LWS_LEADER_ADDRESS"),
			Usage: "host of the tokenizer workers and detokd, reached over tcp:// with CURVE (\"\": one host, ipc:// sockets)"},
		&cli.StringFlag{Name: "rank-addresses", Destination: &r.RankAddresses, Sources: cli.EnvVars("RANK_ADDRESSES"),
			Usage: "each rank's host, comma-separated, in rank order (default under a LeaderWorkerSet: worker pod i+1 runs rank i)"},
		&cli.IntFlag{Name: "zmq-port", Destination: &r.ZMQPort, Value: 5600, Sources: cli.EnvVars("ZMQ_PORT"),
			Usage: "first tcp port across hosts: detokd at it, worker w at +1+w, rank r at +257+r"},
		&cli.StringFlag{Name: "curve-keys", Destination: &r.CurveKeys, Sources: cli.EnvVars("CURVE_KEYS"),
			Usage: "directory holding the engine's CURVE keypair (curve.pub, curve.key), required across hosts; make one with `schedulerd keygen DIR`"},
		&cli.DurationFlag{Name: "peer-timeout", Destination: &r.PeerTimeout, Value: 8 * time.Second, Sources: cli.EnvVars("PEER_TIMEOUT"),
			Usage: "how long a rank or detokd waits at start to reach and authenticate to its peers before it exits naming them"},
	}
}

// RankHosts is each rank's host: --rank-addresses, or under a LeaderWorkerSet the worker pods'
// names derived from the leader's (pod i of group g is <lws>-<g>-<i> in the leader's
// subdomain, LWS_LEADER_ADDRESS being <lws>-<g>.<subdomain>...), worker pod i+1 running rank i.
func (r *Remote) RankHosts(dpSize int) ([]string, error) {
	if r.RankAddresses != "" {
		hosts := strings.Split(r.RankAddresses, ",")
		for i := range hosts {
			hosts[i] = strings.TrimSpace(hosts[i])
		}
		return hosts, nil
	}
	size := os.Getenv("LWS_GROUP_SIZE")
	if size == "" || r.LeaderAddress == "" {
		return nil, nil
	}
	g, err := strconv.Atoi(size)
	if err != nil || g < 2 {
		return nil, fmt.Errorf("LWS_GROUP_SIZE=%q: want a number >= 2 (the leader and one pod per rank)", size)
	}
	if g-1 != dpSize {
		return nil, fmt.Errorf("LWS_GROUP_SIZE=%d runs %d ranks, but --dp-size is %d (or give --rank-addresses)", g, g-1, dpSize)
	}
	pod, rest, _ := strings.Cut(r.LeaderAddress, ".")
	hosts := make([]string, dpSize)
	for i := range hosts {
		hosts[i] = pod + "-" + strconv.Itoa(i+1)
		if rest != "" {
			hosts[i] += "." + rest
		}
	}
	return hosts, nil
}

// LWSRank is this pod's rank under a LeaderWorkerSet (LWS_WORKER_INDEX - 1), if it is set.
func LWSRank() (int, bool, error) {
	s := os.Getenv("LWS_WORKER_INDEX")
	if s == "" {
		return 0, false, nil
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 1 {
		return 0, false, fmt.Errorf("LWS_WORKER_INDEX=%q: a rank runs on a worker pod (index >= 1)", s)
	}
	return i - 1, true, nil
}

// Topology is where this engine's sockets are, with dir the opened run directory. Its errors
// are configuration errors (a restart cannot fix them).
func (c *Config) Topology(dir string) (*ipc.Topology, error) {
	t := &ipc.Topology{RunDir: dir, LeaderHost: c.LeaderAddress, Port: c.ZMQPort}
	var err error
	if t.RankHosts, err = c.RankHosts(c.DPSize); err != nil {
		return nil, AsConfig(err)
	}
	if c.CurveKeys != "" {
		if t.Curve, err = ipc.LoadCurveKeys(c.CurveKeys); err != nil {
			return nil, AsConfig(err)
		}
	}
	if err := t.Check(c.DPSize); err != nil {
		return nil, AsConfig(err)
	}
	return t, nil
}

// JoinPeers opens the topology and, when it spans hosts, checks before anything slow (a model
// load) that this process can reach and authenticate to every endpoint it will write to, so a
// process that cannot join exits within --peer-timeout naming each address and why (status 1:
// the peer may only be late, so supervisors restart it).
func (c *Config) JoinPeers(dir string, peers func(*ipc.Topology) []string) (*ipc.Topology, error) {
	top, err := c.Topology(dir)
	if err != nil {
		return nil, err
	}
	if !top.Remote() {
		return top, nil
	}
	if err := ipc.ProbeAll(peers(top), top.Curve, c.PeerTimeout); err != nil {
		return nil, fmt.Errorf("cannot join the engine's peers: %w", err)
	}
	return top, nil
}
