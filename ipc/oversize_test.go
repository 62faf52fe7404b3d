//go:build unix

package ipc

import (
	"syscall"
	"testing"
)

// TestOversizedFrame: frames over MaxFrameSize are refused at Send, not sent. The frame is
// an untouched anonymous mapping, so the test costs no real memory or zeroing.
func TestOversizedFrame(t *testing.T) {
	big, err := syscall.Mmap(-1, 0, MaxFrameSize+1, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		t.Skipf("cannot map %d bytes: %v", MaxFrameSize+1, err)
	}
	defer syscall.Munmap(big)
	forEachTransport(t, func(t *testing.T, tr Transport) {
		s := push(t, tr, bindAddr(t, "ipc"), true)
		if err := s.Send(big); err == nil {
			t.Fatal("Send accepted a frame over MaxFrameSize")
		}
	})
}
