package perfhost

import (
	"os/exec"
	"testing"
	"time"
)

// A busy child process named by the marker is counted as the run's own work, not as foreign
// load; without the marker the same work is foreign.
func TestReadCPUCountsMarkedProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("burns a core for a second")
	}
	marker := t.TempDir()
	cmd := exec.Command("sh", "-c", "while :; do :; done", "burn", marker)
	a, none := ReadCPU(marker), ReadCPU("")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	b, noneB := ReadCPU(marker), ReadCPU("")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	own := CPUSeconds(b.Own - a.Own)
	if own < 0.5 || own > 1.2 {
		t.Fatalf("the marked process spent %.2f s of CPU in about 1 s of spinning", own)
	}
	// The spinning child is one core of the machine's: without its marker it counts as foreign.
	total := float64(b.Total-a.Total) / TicksPerSecond
	if f, g := Foreign(a, b), Foreign(none, noneB); g < f+0.5*own/total {
		t.Fatalf("foreign share %.2f unmarked, %.2f marked: the spinning process (%.2f of %.2f core-seconds) was not told apart", g, f, own, total)
	}
}

func TestForeign(t *testing.T) {
	a := CPUSample{Total: 1000, Busy: 100, Own: 50, Self: 5}
	cases := []struct {
		b    CPUSample
		want float64
	}{
		// 200 ticks of machine time, 100 busy: 60 the run's, 10 this process's, 30 foreign.
		{CPUSample{Total: 1200, Busy: 200, Own: 110, Self: 15}, 0.15},
		// Everything busy was the run's own.
		{CPUSample{Total: 1200, Busy: 150, Own: 100, Self: 5}, 0},
		// A counted process exited between the reads: its ticks are gone, never negative.
		{CPUSample{Total: 1200, Busy: 150, Own: 10, Self: 5}, 0.25},
		// No time passed.
		{a, 0},
	}
	for _, c := range cases {
		if got := Foreign(a, c.b); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("Foreign(%+v, %+v) = %v, want %v", a, c.b, got, c.want)
		}
	}
}
