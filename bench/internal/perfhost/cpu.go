package perfhost

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPUSample is a snapshot of where the machine's CPU time went, in clock ticks (USER_HZ), to
// tell a run's own work from other load on a shared machine: a benchmark's processes' ticks
// against the whole machine's.
type CPUSample struct {
	// Total is every core's time, Busy the part not idle (nor waiting for I/O); Busy includes
	// time the hypervisor stole, which a run loses as it loses time to other processes.
	Total, Busy uint64
	// Own is the ticks of the processes counted (see ReadCPU), Self this process's.
	Own, Self uint64
}

// ReadCPU reads the machine's ticks and the ticks of every process with an argument equal to
// marker (a run directory, say: the engine's processes and their children), and this process's.
// An empty marker counts no process.
func ReadCPU(marker string) CPUSample {
	var s CPUSample
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		fs := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		for i, f := range fs[1:] {
			if i >= 8 { // guest time is counted in user time already
				break
			}
			v, _ := strconv.ParseUint(f, 10, 64)
			s.Total += v
			if i != 3 && i != 4 { // idle, iowait
				s.Busy += v
			}
		}
	}
	s.Self = procTicks("/proc/self")
	if marker == "" {
		return s
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains("\x00"+string(cmd), "\x00"+marker+"\x00") {
			continue
		}
		s.Own += procTicks(d)
	}
	return s
}

// procTicks is the user and system ticks of the process at dir (a /proc entry); 0 when gone.
func procTicks(dir string) uint64 {
	data, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0
	}
	fs := strings.Fields(s[i+2:]) // from field 3, the state
	if len(fs) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(fs[11], 10, 64)
	st, _ := strconv.ParseUint(fs[12], 10, 64)
	return u + st
}

// TicksPerSecond is USER_HZ, 100 on every Linux architecture Go runs on.
const TicksPerSecond = 100

// CPUSeconds converts ticks to seconds.
func CPUSeconds(ticks uint64) float64 { return float64(ticks) / TicksPerSecond }

// Foreign is the share of the machine's time from a to b that went to other work than the
// processes counted and this one: other processes, or time the hypervisor stole. A run on a
// machine of its own reads near 0; 0.25 on two cores is half a core taken from the run.
func Foreign(a, b CPUSample) float64 {
	total := sub(b.Total, a.Total)
	if total == 0 {
		return 0
	}
	other := float64(sub(b.Busy, a.Busy)) - float64(sub(b.Own, a.Own)) - float64(sub(b.Self, a.Self))
	return max(0, other) / float64(total)
}

// sub is b - a, 0 when a counter went backwards (a counted process exited between the reads).
func sub(b, a uint64) uint64 {
	if b < a {
		return 0
	}
	return b - a
}
