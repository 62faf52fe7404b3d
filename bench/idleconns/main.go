// Command idleconns floods a running engine with idle connections (accepted and silent, as a
// slowloris or a crowd of abandoned keep-alives would hold them) and measures whether new clients
// are still served: the latency of fresh requests during the flood, and the engine's own
// connection counts from /metrics. The flood is split over child processes, since one process's
// descriptor limit would stop it short. Bounded: it holds the flood for -hold, then exits.
//
//	go run ./bench/idleconns -addr 127.0.0.1:30000 -conns 20000
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:30000", "engine address")
	conns := flag.Int("conns", 20000, "idle connections to open")
	procs := flag.Int("procs", 4, "child processes sharing the flood")
	hold := flag.Duration("hold", 5*time.Second, "how long the open flood is held while new clients are measured")
	keepAlive := flag.Bool("keepalive", false, "each flood connection makes one request (GET /health) first, then idles kept alive")
	child := flag.Int("child", 0, "internal: open this many connections and hold them")
	flag.Parse()
	if *child > 0 {
		holdConns(*addr, *child, *keepAlive)
		return
	}
	if err := run(*addr, *conns, *procs, *hold, *keepAlive); err != nil {
		fmt.Fprintln(os.Stderr, "idleconns:", err)
		os.Exit(1)
	}
}

// holdConns opens n connections, reports how many opened, and holds them silent until a line
// arrives on stdin; then it reports how many the server closed.
func holdConns(addr string, n int, keepAlive bool) {
	var held []net.Conn
	failed := 0
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil && keepAlive {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			var resp *http.Response
			if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			_ = c.SetDeadline(time.Time{})
		}
		if err != nil {
			failed++
			if c != nil {
				c.Close()
			}
			continue
		}
		held = append(held, c)
	}
	fmt.Printf("opened %d failed %d\n", len(held), failed)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the parent has measured

	closed := 0
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			closed++ // the server shed it
		}
		c.Close()
	}
	fmt.Printf("shed %d\n", closed)
}

func run(addr string, conns, procs int, hold time.Duration, keepAlive bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	t00 := time.Now()
	start := t00
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened, failed, shed := 0, 0, 0
	ready := make(chan struct{}, procs)
	var stdins []io.WriteCloser
	for p := 0; p < procs; p++ {
		c := exec.Command(exe, "-addr", addr, "-child", strconv.Itoa(conns/procs), "-keepalive="+strconv.FormatBool(keepAlive))
		out, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		in, err := c.StdinPipe()
		if err != nil {
			return err
		}
		stdins = append(stdins, in)
		if err := c.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var a, b int
				mu.Lock()
				if n, _ := fmt.Sscanf(sc.Text(), "opened %d failed %d", &a, &b); n == 2 {
					opened, failed = opened+a, failed+b
					ready <- struct{}{}
				} else if n, _ := fmt.Sscanf(sc.Text(), "shed %d", &a); n == 1 {
					shed += a
				}
				mu.Unlock()
			}
			_ = c.Wait()
		}()
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	var lat []time.Duration
	errs := 0
	flooding := true
	for flooding || time.Since(start) < hold {
		select {
		case <-ready:
			if procs--; procs == 0 {
				flooding, start = false, time.Now() // all open: measure for hold from here
				fmt.Printf("flood open after %v\n", time.Since(t00).Round(time.Millisecond))
			}
		default:
		}
		t0 := time.Now()
		resp, err := client.Post("http://"+addr+"/generate", "application/json",
			strings.NewReader(`{"input_ids":[11,22,33],"sampling_params":{"max_new_tokens":4,"temperature":0}}`))
		if err != nil || resp.StatusCode != 200 {
			errs++
			if resp != nil {
				resp.Body.Close()
			}
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
	}
	metrics := ""
	if resp, err := client.Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "llm_http_connections_") {
				metrics += "  " + line + "\n"
			}
		}
	}
	for _, in := range stdins {
		_, _ = in.Write([]byte("\n"))
		in.Close()
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(q*float64(len(lat)-1))]
	}
	fmt.Printf("flood: %d connections asked, %d opened, %d failed to open, %d closed by the server by the end\n", conns, opened, failed, shed)
	fmt.Printf("new clients during the flood (open and held %v): %d served, %d failed; latency p50 %v p99 %v max %v\n", hold, len(lat), errs, pct(0.5), pct(0.99), pct(1))
	fmt.Print("engine /metrics at the end of the flood:\n", metrics)
	if len(lat) == 0 || errs > 0 {
		return fmt.Errorf("new clients were not all served during the flood")
	}
	return nil
}
