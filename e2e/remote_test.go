package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmserve/llmserve/worker"
	"golang.org/x/sys/unix"
)

// netns is a network namespace the test made: one "host".
type netns struct {
	name string
}

// ip runs the ip(8) command and fails the test with its output when it fails.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetns makes a namespace with loopback up; t.Cleanup kills whatever runs in it and deletes
// it (its veth ends go with it).
func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	ip(t, "netns", "add", name)
	n := &netns{name: name}
	t.Cleanup(func() {
		n.killAll()
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	ip(t, "-n", name, "link", "set", "lo", "up")
	return n
}

// killAll SIGKILLs every process in the namespace, as a host that loses power.
func (n *netns) killAll() {
	out, _ := exec.Command("ip", "netns", "pids", n.name).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// link joins namespaces a and b with a veth pair, a at addrA and b at addrB (CIDR).
func link(t *testing.T, a, b *netns, ifa, ifb, addrA, addrB string) {
	t.Helper()
	ip(t, "-n", a.name, "link", "add", ifa, "type", "veth", "peer", "name", ifb, "netns", b.name)
	ip(t, "-n", a.name, "addr", "add", addrA, "dev", ifa)
	ip(t, "-n", b.name, "addr", "add", addrB, "dev", ifb)
	ip(t, "-n", a.name, "link", "set", ifa, "up")
	ip(t, "-n", b.name, "link", "set", ifb, "up")
}

// client is an HTTP client whose connections are made inside the namespace (the socket is
// created on a thread switched into it, and keeps that namespace for its life).
func (n *netns) client() *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			// Switch this thread into the namespace for the dial only, then back: the socket
			// keeps the namespace it was made in. A thread that cannot switch back is never
			// unlocked, so it ends with the goroutine.
			runtime.LockOSThread()
			self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
			if err != nil {
				ch <- res{nil, err}
				return
			}
			defer self.Close()
			f, err := os.Open("/var/run/netns/" + n.name)
			if err == nil {
				err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
				f.Close()
			}
			if err != nil {
				runtime.UnlockOSThread()
				ch <- res{nil, fmt.Errorf("setns %s: %w", n.name, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// hostProc is one engine process started inside a namespace.
type hostProc struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{} // closed when it exited
}

func (n *netns) start(t *testing.T, name, bin string, args ...string) *hostProc {
	t.Helper()
	p := &hostProc{log: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", n.name, filepath.Join(binDir, bin)}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- %s log ----\n%s", name, tail(p.log.String(), 3000))
		}
	})
	return p
}

// canMakeNetns reports why the test cannot make network namespaces ("" when it can).
func canMakeNetns() string {
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip(8) (iproute2) is not installed"
	}
	name := fmt.Sprintf("llmsprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot make a network namespace (needs CAP_NET_ADMIN, e.g. root): %v %s", err, bytes.TrimSpace(out))
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return ""
}

// TestRanksOnOtherHosts runs the tokenizer workers and detokd in one network namespace and
// each of two ranks in its own, joined by veth pairs only, over tcp:// with CURVE: a missing
// rank is named in /health and /get_load, streams are exact, a rank "host" whose processes are
// all SIGKILLed fails only its requests within about a second, and a rank holding other CURVE
// keys is refused at start within 10 s, naming the address and why.
func TestRanksOnOtherHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three network namespaces and a real engine")
	}
	if why := canMakeNetns(); why != "" {
		t.Skip(why)
	}
	tag := strconv.Itoa(os.Getpid() % 100000)
	leader := newNetns(t, "llmsL"+tag)
	hostA := newNetns(t, "llmsA"+tag)
	hostB := newNetns(t, "llmsB"+tag)
	// A private test subnet, inside the test's namespaces only.
	link(t, leader, hostA, "vl0", "va0", "10.231.1.1/24", "10.231.1.2/24")
	link(t, leader, hostB, "vl1", "vb0", "10.231.2.1/24", "10.231.2.2/24")
	leaderFor := []string{"10.231.1.1", "10.231.2.1"} // the leader as each rank's host reaches it
	ranks := "10.231.1.2,10.231.2.2"

	keys, wrongKeys := filepath.Join(t.TempDir(), "keys"), filepath.Join(t.TempDir(), "wrong")
	for _, d := range []string{keys, wrongKeys} {
		if out, err := exec.Command(filepath.Join(binDir, "schedulerd"), "keygen", d).CombinedOutput(); err != nil {
			t.Fatalf("keygen: %v %s", err, out)
		}
	}
	common := func(runDir, leaderAddr, keyDir string) []string {
		return []string{"--model-path", modelPath, "--run-dir", runDir, "--port", "30000", "--dp-size", "2",
			"--tokenizer-worker-num", "2", "--leader-address", leaderAddr, "--rank-addresses", ranks,
			"--curve-keys", keyDir, "--log-level", "debug"}
	}
	leaderDir := filepath.Join(t.TempDir(), "run")
	leader.start(t, "tokenizerd", "tokenizerd", append(append([]string{"serve"}, common(leaderDir, "10.231.1.1", keys)...), "--rank-timeout", "500ms")...)
	detok := leader.start(t, "detokd", "detokd", common(leaderDir, "10.231.1.1", keys)...)
	client := leader.client()
	base := "http://127.0.0.1:30000"

	// Before the ranks start, the workers name each missing rank and its address.
	var health string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var code int
		if code, health = getWith(client, base+"/health"); code == 503 && strings.Contains(health, "rank 1 has not reported yet (at tcp://10.231.2.2:5858)") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(health, "rank 0 has not reported yet (at tcp://10.231.1.2:5857)") {
		t.Fatalf("/health before the ranks start: %s", health)
	}
	var load struct {
		MissingRanks []string `json:"missing_ranks"`
	}
	if _, body := getWith(client, base+"/get_load"); json.Unmarshal([]byte(body), &load) != nil || len(load.MissingRanks) != 2 ||
		!strings.Contains(load.MissingRanks[1], "tcp://10.231.2.2:5858") {
		t.Fatalf("/get_load before the ranks start: %s", body)
	}

	startRank := func(h *netns, r int, keyDir string) *hostProc {
		return h.start(t, fmt.Sprintf("schedulerd%d", r), "schedulerd", append([]string{"serve"},
			append(common(filepath.Join(t.TempDir(), "run"), leaderFor[r], keyDir), "--dp-rank", strconv.Itoa(r))...)...)
	}
	startRank(hostA, 0, keys)
	rankB := startRank(hostB, 1, keys)
	deadline = time.Now().Add(60 * time.Second)
	for inRow := 0; inRow < 8; {
		if time.Now().After(deadline) {
			t.Fatalf("engine not healthy across hosts: %s", health)
		}
		var code int
		if code, health = getWith(client, base+"/health"); code == 200 {
			inRow++
		} else {
			inRow = 0
		}
		time.Sleep(25 * time.Millisecond)
	}

	// Streams are exact on both ranks: the streamed deltas add up to the whole answer, and
	// both ranks (same model, greedy) answer alike.
	var whole [2]generateResp
	for r := range 2 {
		body := map[string]any{"input_ids": promptIDs, "routed_dp_rank": r,
			"sampling_params": map[string]any{"max_new_tokens": 24, "temperature": 0, "ignore_eos": true}}
		code, out := postWith(client, base+"/generate", body)
		if code != 200 || json.Unmarshal([]byte(out), &whole[r]) != nil || len(whole[r].OutputIDs) != 24 {
			t.Fatalf("rank %d whole: %d %s", r, code, out)
		}
		body["stream"] = true
		var text string
		var ids []int32
		events := streamIn(t, client, base+"/generate", body)
		for _, ev := range events[:len(events)-1] {
			var c generateResp
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("rank %d chunk %q: %v", r, ev, err)
			}
			text += c.Text
			ids = append(ids, c.OutputIDs...)
		}
		if text != whole[r].Text || fmt.Sprint(ids) != fmt.Sprint(whole[r].OutputIDs) {
			t.Errorf("rank %d: streamed %q %v, whole %q %v", r, text, ids, whole[r].Text, whole[r].OutputIDs)
		}
	}
	if whole[0].Text != whole[1].Text {
		t.Errorf("rank 0 answered %q, rank 1 %q", whole[0].Text, whole[1].Text)
	}

	// Host B dies: all its processes SIGKILLed. Exactly rank 1's requests fail, within ~1 s.
	type result struct {
		rank int
		end  time.Time
		last string
	}
	const perRank = 3
	results := make(chan result, 2*perRank)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 * perRank {
		r := i % 2
		go func() {
			body := map[string]any{"input_ids": promptIDs, "routed_dp_rank": r, "stream": true,
				"sampling_params": map[string]any{"max_new_tokens": 4000, "ignore_eos": true}}
			var last string
			_ = streamCtx(ctx, client, base+"/generate", body, func(ev string) {
				if ev != "[DONE]" {
					last = ev
				}
			})
			results <- result{rank: r, end: time.Now(), last: last}
		}()
	}
	waitFor(t, 20*time.Second, func() bool {
		var rep worker.LoadReport
		_, body := getWith(client, base+"/get_load")
		return json.Unmarshal([]byte(body), &rep) == nil && len(rep.Dispatch.Ranks) == 2 &&
			rep.Dispatch.Ranks[0].Reported.Running == perRank && rep.Dispatch.Ranks[1].Reported.Running == perRank
	})
	hostB.killAll()
	killed := time.Now()
	<-rankB.done
	for range perRank {
		select {
		case res := <-results:
			if res.rank != 1 {
				t.Fatalf("a request on rank 0 (alive) ended when rank 1's host died: %q", res.last)
			}
			lat := res.end.Sub(killed)
			t.Logf("a request on the dead host ended %v after the kill", lat.Round(time.Millisecond))
			if lat > 1500*time.Millisecond {
				t.Errorf("a request on the dead host failed after %v, want about 1 s", lat)
			}
			if !strings.Contains(res.last, "rank 1") {
				t.Errorf("a request on the dead host ended without an error naming rank 1: %q", res.last)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("the dead host's requests did not fail within 3 s")
		}
	}
	select {
	case res := <-results:
		t.Fatalf("a request on the live rank %d ended: %q", res.rank, res.last)
	case <-time.After(500 * time.Millisecond):
	}
	cancel()

	// A rank with other CURVE keys is refused at start, within 10 s, naming the address.
	start := time.Now()
	bad := startRank(hostB, 1, wrongKeys)
	select {
	case <-bad.done:
	case <-time.After(12 * time.Second):
		t.Fatalf("a rank with the wrong keys still runs after 12 s:\n%s", bad.log.String())
	}
	took := time.Since(start)
	if bad.cmd.ProcessState.ExitCode() == 0 || took > 10*time.Second {
		t.Errorf("wrong-key rank exited %d after %v, want non-zero within 10 s", bad.cmd.ProcessState.ExitCode(), took)
	}
	msg := bad.log.String()
	if !strings.Contains(msg, "tcp://10.231.2.1:5600") || !strings.Contains(msg, "keys") {
		t.Errorf("wrong-key rank's exit does not name the address and the keys: %s", msg)
	}
	if !waitLog(detok.log, "refused peer", 2*time.Second) {
		t.Errorf("detokd did not log the refused peer:\n%s", tail(detok.log.String(), 2000))
	}
	t.Logf("wrong-key rank refused after %v: %s", took.Round(time.Millisecond), strings.TrimSpace(tail(msg, 400)))
}

func waitLog(b *syncBuffer, s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(b.String(), s) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamIn posts body and returns the stream's data payloads ([DONE] included).
func streamIn(t *testing.T, c *http.Client, url string, body any) []string {
	t.Helper()
	var events []string
	if err := streamCtx(context.Background(), c, url, body, func(ev string) { events = append(events, ev) }); err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream did not end with [DONE]: %q", events)
	}
	return events
}

func streamCtx(ctx context.Context, c *http.Client, url string, body any, each func(string)) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, msg)
	}
	data, err := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if ev, ok := strings.CutPrefix(line, "data: "); ok {
			each(ev)
		}
	}
	return err
}
