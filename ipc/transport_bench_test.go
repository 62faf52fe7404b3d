//go:build unix

package ipc

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the user+system CPU time this process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTransport streams b.N frames from one PUSH to one PULL over ipc:// in this process.
// ns/op is wall time per message; cpu-ns/msg is the CPU both ends (and libzmq's I/O thread)
// spent per message; msgs/s is the throughput.
func BenchmarkTransport(b *testing.B) {
	for _, name := range Names() {
		tr, _ := ByName(name)
		for _, size := range []struct {
			name string
			n    int
		}{{"64B", 64}, {"4KiB", 4 << 10}} {
			b.Run(name+"/"+size.name, func(b *testing.B) {
				dir, err := TempRunDir("")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { removeAllQuiet(dir) })
				r, err := tr.Pull(Endpoint(dir, "bench"), true)
				if err != nil {
					b.Fatal(err)
				}
				defer r.Close()
				s, err := tr.Push(r.Endpoint(), false)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				frame := make([]byte, size.n)
				// Warm up the connection so the dial is not measured.
				if err := s.Send(frame); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Recv(5 * time.Second); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(size.n))
				b.ResetTimer()
				cpu0, wall0 := cpuTime(b), time.Now()
				errc := make(chan error, 1)
				go func() {
					for range b.N {
						if err := s.Send(frame); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				for range b.N {
					if _, err := r.Recv(5 * time.Second); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				wall, cpu := time.Since(wall0), cpuTime(b)-cpu0
				b.StopTimer()
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
				b.ReportMetric(float64(b.N)/wall.Seconds(), "msgs/s")
			})
		}
	}
}

func removeAllQuiet(dir string) { _ = os.RemoveAll(dir) }
