package ipc

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The sockets of one engine, named inside its run directory. Each is bound by the process that
// reads from it: a scheduler binds its request socket, detokd its input, each tokenizer worker
// its output socket; writers connect.

// SchedulerEndpoint is where DP rank r receives GenerateRequests and Aborts.
func SchedulerEndpoint(dir string, rank int) string {
	return Endpoint(dir, "sched-"+strconv.Itoa(rank)+".sock")
}

// DetokEndpoint is where detokd receives every rank's TokenBatches.
func DetokEndpoint(dir string) string { return Endpoint(dir, "detok.sock") }

// WorkerEndpoint is where tokenizer worker w receives its requests' outputs.
func WorkerEndpoint(dir string, worker int) string {
	return Endpoint(dir, "worker-"+strconv.Itoa(worker)+".sock")
}

// MaxWorkers is the most tokenizer workers an engine has; tcp:// ports are laid out by it.
const MaxWorkers = 256

// Topology names the sockets of one engine. With no hosts set every socket is ipc:// in RunDir
// (one host). LeaderHost puts the tokenizer workers' output sockets and detokd's input on the
// leader host over tcp://; RankHosts puts each rank's request socket on its own host. Each
// socket is still bound by the process that reads it (on all its host's interfaces) and
// connected to by the writers, so every process needs only these addresses: no control plane.
// Ports from Port: detokd Port, worker w Port+1+w, rank r Port+1+MaxWorkers+r.
type Topology struct {
	// RunDir holds the ipc:// sockets and the processes' locks.
	RunDir string
	// LeaderHost is the host of the tokenizer workers and detokd ("": ipc:// in RunDir).
	LeaderHost string
	// RankHosts[r] is rank r's host (nil: ipc:// in RunDir).
	RankHosts []string
	// Port is the first tcp port (see the type's comment).
	Port int
	// Curve secures every tcp:// socket; required when a host is set.
	Curve *CurveKeys
}

// LocalTopology is the one-host topology of the run directory dir.
func LocalTopology(dir string) *Topology { return &Topology{RunDir: dir} }

// Remote reports whether any socket is tcp://.
func (t *Topology) Remote() bool { return t.LeaderHost != "" || len(t.RankHosts) > 0 }

// Check refuses a topology that would send plain text between hosts or cannot be laid out.
func (t *Topology) Check(dpSize int) error {
	if !t.Remote() {
		return nil
	}
	if t.Curve == nil {
		return errors.New("tcp:// between hosts needs CURVE keys: --curve-keys DIR (make them with `schedulerd keygen DIR`)")
	}
	if len(t.RankHosts) > 0 && t.LeaderHost == "" {
		return errors.New("ranks on other hosts need --leader-address (where the tokenizer workers and detokd run)")
	}
	if len(t.RankHosts) > 0 && len(t.RankHosts) != dpSize {
		return fmt.Errorf("%d rank addresses for --dp-size %d", len(t.RankHosts), dpSize)
	}
	if t.Port < 1 || t.Port+1+MaxWorkers+dpSize > 65535 {
		return fmt.Errorf("--zmq-port %d: the engine's ports must fit below 65536", t.Port)
	}
	for _, h := range append([]string{t.LeaderHost}, t.RankHosts...) {
		if strings.ContainsAny(h, "/:[] ") && net.ParseIP(h) == nil {
			return fmt.Errorf("address %q: want a host name or IP, without scheme or port", h)
		}
	}
	return nil
}

func tcpEndpoint(host string, port int, bind bool) string {
	if bind {
		host = "*"
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// Scheduler is where rank r receives requests (bind: the address to bind).
func (t *Topology) Scheduler(r int, bind bool) string {
	if len(t.RankHosts) == 0 {
		return SchedulerEndpoint(t.RunDir, r)
	}
	return tcpEndpoint(t.RankHosts[r], t.Port+1+MaxWorkers+r, bind)
}

// Detok is where detokd receives the ranks' token batches.
func (t *Topology) Detok(bind bool) string {
	if t.LeaderHost == "" {
		return DetokEndpoint(t.RunDir)
	}
	return tcpEndpoint(t.LeaderHost, t.Port, bind)
}

// Worker is where tokenizer worker w receives its requests' outputs.
func (t *Topology) Worker(w int, bind bool) string {
	if t.LeaderHost == "" {
		return WorkerEndpoint(t.RunDir, w)
	}
	return tcpEndpoint(t.LeaderHost, t.Port+1+w, bind)
}

// Options adds the topology's CURVE keys to opts (they apply to tcp:// endpoints only).
func (t *Topology) Options(opts ...Option) []Option {
	if t.Curve == nil {
		return opts
	}
	return append(opts, WithCurve(t.Curve))
}

// ProbeAll probes every endpoint at once (see Probe) and joins their errors.
func ProbeAll(endpoints []string, k *CurveKeys, timeout time.Duration) error {
	errs := make([]error, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = Probe(ep, k, timeout) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}
