package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
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

// goSeries are the Go runtime's series, from runtime/metrics.
var goSeries = []struct {
	name, help, sample string
	counter            bool
}{
	{"go_goroutines", "Number of goroutines that currently exist.", "/sched/goroutines:goroutines", false},
	{"go_threads", "Number of OS threads the Go runtime may run Go code on at once (GOMAXPROCS).", "/sched/gomaxprocs:threads", false},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use.", "/memory/classes/heap/objects:bytes", false},
	{"go_memstats_sys_bytes", "Number of bytes obtained from the system.", "/memory/classes/total:bytes", false},
	{"go_gc_cycles_total", "Completed GC cycles.", "/gc/cycles/total:gc-cycles", true},
	{"go_gc_heap_goal_bytes", "Heap size target for the end of the GC cycle.", "/gc/heap/goal:bytes", false},
}

// RegisterOwnProcess registers this process's process_* and go_* series as per-worker series
// (NewWorkerGaugeFunc), labelled labels: with a shared store, every worker's appear in every
// scrape.
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
		sample := []metrics.Sample{{Name: s.sample}}
		fn := func() float64 {
			metrics.Read(sample)
			switch v := sample[0].Value; v.Kind() {
			case metrics.KindUint64:
				return float64(v.Uint64())
			case metrics.KindFloat64:
				return v.Float64()
			}
			return 0
		}
		if s.counter {
			r.NewWorkerCounterFunc(s.name, s.help, labels, fn)
		} else {
			r.NewWorkerGaugeFunc(s.name, s.help, labels, fn)
		}
	}
}

// RegisterBuildInfo registers llmserve_build_info: 1, labelled with the build's version and
// commit and the Go version, as Prometheus's own build_info gauges are.
func (r *Registry) RegisterBuildInfo(version, commit string) {
	r.NewGaugeFunc("llmserve_build_info", "The build: version, git commit and Go version (always 1).",
		Labels{{"version", version}, {"revision", commit}, {"goversion", runtime.Version()}}, func() float64 { return 1 })
}
