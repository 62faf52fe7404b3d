package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process metrics as the Prometheus Go client's process and Go collectors name them, read from
// /proc (Linux) and runtime/metrics, and the build's identity.

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux
// architecture Go supports (sysconf(_SC_CLK_TCK) would need cgo).
const clockTicks = 100

// ProcStat is what /proc says of one process.
type ProcStat struct {
	// CPUSeconds is user + system CPU time.
	CPUSeconds float64
	// StartTime is when the process started, in seconds since the Unix epoch.
	StartTime float64
	// RSS and VSize are its resident and virtual memory, bytes.
	RSS, VSize float64
	// OpenFDs and MaxFDs are its open descriptors and their soft limit.
	OpenFDs, MaxFDs float64
	// Cmdline is its command line, NUL-separated.
	Cmdline string
}

// bootTime is the kernel's boot time (seconds since the epoch), read once.
var bootTime = sync.OnceValue(func() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
})

// ReadProc reads pid's /proc entries.
func ReadProc(pid int) (ProcStat, error) {
	var p ProcStat
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return p, fmt.Errorf("read process %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return p, fmt.Errorf("read process %d: malformed stat", pid)
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3 (state)
	if len(f) < 22 {
		return p, fmt.Errorf("read process %d: stat has %d fields", pid, len(f)+2)
	}
	num := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v }
	p.CPUSeconds = (num(14) + num(15)) / clockTicks
	p.StartTime = bootTime() + num(22)/clockTicks
	p.VSize = num(23)
	p.RSS = num(24) * float64(os.Getpagesize())
	if ents, err := os.ReadDir(dir + "/fd"); err == nil {
		p.OpenFDs = float64(len(ents))
	}
	if lim, err := os.Open(dir + "/limits"); err == nil {
		sc := bufio.NewScanner(lim)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Max open files"); ok {
				if fs := strings.Fields(rest); len(fs) > 0 {
					p.MaxFDs, _ = strconv.ParseFloat(fs[0], 64)
				}
			}
		}
		lim.Close()
	}
	if cl, err := os.ReadFile(dir + "/cmdline"); err == nil {
		p.Cmdline = string(cl)
	}
	return p, nil
}

// procReader caches one process's ProcStat for a moment, so that the six series of one scrape
// read /proc once.
type procReader struct {
	pid func() int // the process to read (0: none now)
	// mu guards at and last.
	mu   sync.Mutex
	at   time.Time
	last ProcStat
	ok   bool
}

func (r *procReader) get() (ProcStat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) < 100*time.Millisecond {
		return r.last, r.ok
	}
	r.at = time.Now()
	r.ok = false
	if pid := r.pid(); pid > 0 {
		var err error
		r.last, err = ReadProc(pid)
		r.ok = err == nil
	}
	return r.last, r.ok
}

// processSeries are the process_* series: name, help, counter or gauge, and the value.
var processSeries = []struct {
	name, help string
	counter    bool
	get        func(*ProcStat) float64
}{
	{"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", true, func(p *ProcStat) float64 { return p.CPUSeconds }},
	{"process_resident_memory_bytes", "Resident memory size in bytes.", false, func(p *ProcStat) float64 { return p.RSS }},
	{"process_virtual_memory_bytes", "Virtual memory size in bytes.", false, func(p *ProcStat) float64 { return p.VSize }},
	{"process_start_time_seconds", "Start time of the process since unix epoch in seconds.", false, func(p *ProcStat) float64 { return p.StartTime }},
	{"process_open_fds", "Number of open file descriptors.", false, func(p *ProcStat) float64 { return p.OpenFDs }},
	{"process_max_fds", "Maximum number of open file descriptors.", false, func(p *ProcStat) float64 { return p.MaxFDs }},
}

// RegisterProcess registers the process_* series of the process pid returns (0, or a process
// that is gone: the series are absent), labelled labels. Another process of the engine (a rank,
// detokd) is read from /proc at each scrape.
func (r *Registry) RegisterProcess(labels Labels, pid func() int) {
	pr := &procReader{pid: pid}
	for _, s := range processSeries {
		k := kindGauge
		if s.counter {
			k = kindCounter
		}
		r.add(s.name, s.help, k, &optionalFunc{lbl: labels.String(), fn: func() (float64, bool) {
			p, ok := pr.get()
			return s.get(&p), ok
		}})
	}
}

// optionalFunc is a series read at scrape time that may be absent.
type optionalFunc struct {
	lbl string
	fn  func() (float64, bool)
}

func (o *optionalFunc) labels() string { return o.lbl }
func (o *optionalFunc) write(w io.Writer, name string) {
	if v, ok := o.fn(); ok {
		fmt.Fprintf(w, "%s%s %s\n", name, o.lbl, fmtFloat(v))
	}
}

// GoRuntime is a process's Go runtime stats, the go_* series. ipc.GoStats carries it on the wire
// (the two types have the same fields, so each converts to the other): a rank and detokd send
// theirs to the workers, whose /metrics shows them. An empty GoVersion means no stats.
type GoRuntime struct {
	// Goroutines is the number of live goroutines; GOMAXPROCS the runtime's setting.
	Goroutines, GOMAXPROCS uint64
	// HeapAllocBytes is the bytes of live and not yet swept heap objects; HeapInuseBytes adds
	// the unused space of the heap's in-use spans; SysBytes is all memory mapped by the runtime.
	HeapAllocBytes, HeapInuseBytes, SysBytes uint64
	// HeapGoalBytes is the heap size the current GC cycle aims at.
	HeapGoalBytes uint64
	// GCCycles counts completed GC cycles; GCPauseSeconds is their stop-the-world pauses' total
	// (estimated from runtime/metrics' pause histogram).
	GCCycles       uint64
	GCPauseSeconds float64
	// GoVersion is the Go release the process was built with (runtime.Version()).
	GoVersion string
}

// The runtime/metrics samples GoRuntime is read from, in the order readGoRuntime takes them.
var goSamples = []string{
	"/sched/goroutines:goroutines",
	"/sched/gomaxprocs:threads",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
}

// goRuntimeCache holds the last ReadGoRuntime, so that a caller on a hot path (a rank's load
// report after every step) reads runtime/metrics at most once a second.
var goRuntimeCache struct {
	// mu guards at, last and samples.
	mu      sync.Mutex
	at      time.Time
	last    GoRuntime
	samples []metrics.Sample
}

// ReadGoRuntime returns this process's Go runtime stats, read at most once a second.
func ReadGoRuntime() GoRuntime {
	c := &goRuntimeCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.GoVersion != "" && time.Since(c.at) < time.Second {
		return c.last
	}
	if c.samples == nil {
		c.samples = make([]metrics.Sample, len(goSamples))
		for i, name := range goSamples {
			c.samples[i].Name = name
		}
	}
	metrics.Read(c.samples)
	c.at, c.last = time.Now(), goRuntimeFrom(c.samples)
	return c.last
}

// goRuntimeFrom converts samples read for goSamples (a sample the runtime lacks reads as 0).
func goRuntimeFrom(s []metrics.Sample) GoRuntime {
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	var pause float64
	if s[7].Value.Kind() == metrics.KindFloat64Histogram {
		pause = histogramTotal(s[7].Value.Float64Histogram())
	}
	return GoRuntime{Goroutines: u(0), GOMAXPROCS: u(1), HeapAllocBytes: u(2), HeapInuseBytes: u(2) + u(3),
		SysBytes: u(4), HeapGoalBytes: u(5), GCCycles: u(6), GCPauseSeconds: pause, GoVersion: runtime.Version()}
}

// histogramTotal estimates the sum of a runtime/metrics histogram's observations: each bucket's
// count times its midpoint (an unbounded bucket's finite edge).
func histogramTotal(h *metrics.Float64Histogram) float64 {
	var sum float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		v := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			v = hi
		case math.IsInf(hi, 1):
			v = lo
		}
		sum += float64(n) * v
	}
	return sum
}

// goSeries are the go_* series of a GoRuntime: name, help, counter or gauge, and the value.
var goSeries = []struct {
	name, help string
	counter    bool
	get        func(*GoRuntime) float64
}{
	{"go_goroutines", "Number of goroutines that currently exist.", false, func(g *GoRuntime) float64 { return float64(g.Goroutines) }},
	{"go_threads", "Number of OS threads the Go runtime may run Go code on at once (GOMAXPROCS).", false, func(g *GoRuntime) float64 { return float64(g.GOMAXPROCS) }},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", false, func(g *GoRuntime) float64 { return float64(g.HeapAllocBytes) }},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes in in-use spans.", false, func(g *GoRuntime) float64 { return float64(g.HeapInuseBytes) }},
	{"go_memstats_sys_bytes", "Number of bytes obtained from the system.", false, func(g *GoRuntime) float64 { return float64(g.SysBytes) }},
	{"go_gc_heap_goal_bytes", "Heap size target for the end of the GC cycle.", false, func(g *GoRuntime) float64 { return float64(g.HeapGoalBytes) }},
	{"go_gc_cycles_total", "Completed GC cycles.", true, func(g *GoRuntime) float64 { return float64(g.GCCycles) }},
	{"go_gc_pause_seconds_total", "Total stop-the-world GC pause time (estimated from the runtime's pause histogram).", true, func(g *GoRuntime) float64 { return g.GCPauseSeconds }},
}

// goInfoHelp is go_info's help, as the Prometheus Go collector's.
const goInfoHelp = "Information about the Go environment."

// RegisterOwnProcess registers this process's process_* and go_* series as per-worker series
// (NewWorkerGaugeFunc), labelled labels: with a shared store, every worker's appear in every
// scrape. go_info, the same for every worker of one build, is not per worker.
func (r *Registry) RegisterOwnProcess(labels Labels) {
	pid := os.Getpid()
	pr := &procReader{pid: func() int { return pid }}
	for _, s := range processSeries {
		fn := func() float64 { p, _ := pr.get(); return s.get(&p) }
		if s.counter {
			r.NewWorkerCounterFunc(s.name, s.help, labels, fn)
		} else {
			r.NewWorkerGaugeFunc(s.name, s.help, labels, fn)
		}
	}
	for _, s := range goSeries {
		fn := func() float64 { g := ReadGoRuntime(); return s.get(&g) }
		if s.counter {
			r.NewWorkerCounterFunc(s.name, s.help, labels, fn)
		} else {
			r.NewWorkerGaugeFunc(s.name, s.help, labels, fn)
		}
	}
	info := append(append(Labels(nil), labels...), [2]string{"version", runtime.Version()})
	r.NewInfoFunc("go_info", goInfoHelp, func() Labels { return info })
}

// RegisterGoRuntime registers the go_* series and go_info of another process of the engine (a
// rank, detokd), labelled labels, from the stats it last reported: get returns them, or false
// while there are none (the series are then absent).
func (r *Registry) RegisterGoRuntime(labels Labels, get func() (GoRuntime, bool)) {
	lbl := labels.String()
	for _, s := range goSeries {
		k := kindGauge
		if s.counter {
			k = kindCounter
		}
		r.add(s.name, s.help, k, &optionalFunc{lbl: lbl, fn: func() (float64, bool) {
			g, ok := get()
			return s.get(&g), ok
		}})
	}
	r.NewInfoFunc("go_info", goInfoHelp, func() Labels {
		g, ok := get()
		if !ok || g.GoVersion == "" {
			return nil
		}
		return append(append(Labels(nil), labels...), [2]string{"version", g.GoVersion})
	})
}

// RegisterBuildInfo registers llmserve_build_info: 1, labelled with the build's version and
// commit and the Go version, as Prometheus's own build_info gauges are.
func (r *Registry) RegisterBuildInfo(version, commit string) {
	r.NewGaugeFunc("llmserve_build_info", "The build: version, git commit and Go version (always 1).",
		Labels{{"version", version}, {"revision", commit}, {"goversion", runtime.Version()}}, func() float64 { return 1 })
}
