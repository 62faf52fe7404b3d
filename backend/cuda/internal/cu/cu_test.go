package cu

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"
)

// openOrSkip opens device 0, or skips with the loader's own error where there is no driver or
// no device.
func openOrSkip(t *testing.T) *Context {
	t.Helper()
	if err := Load(); err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	c, err := Open(0)
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestLoadErrorNamesTheLoader(t *testing.T) {
	err := Load()
	if err == nil {
		t.Skip("a CUDA driver is present")
	}
	if !strings.Contains(err.Error(), "cuda") {
		t.Fatalf("loader error %q does not say what failed", err)
	}
	if _, oerr := Open(0); oerr == nil || oerr.Error() != err.Error() {
		t.Fatalf("Open error %v, want the loader's %v", oerr, err)
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Op: "cuMemAlloc", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"}
	if got, want := e.Error(), "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := (&Error{Op: "cuInit", Code: 999}).Error(); !strings.Contains(got, "CUresult 999") {
		t.Fatalf("unnamed code: %q", got)
	}
	if !(&Error{Code: ErrIllegalAddress}).Sticky() || (&Error{Code: 2}).Sticky() {
		t.Fatal("Sticky misclassifies")
	}
}

func TestRoundTrip(t *testing.T) {
	c := openOrSkip(t)
	t.Logf("device %d: %s sm_%d%d, %d SMs", c.Ordinal, c.Name, c.Major, c.Minor, c.SMs)
	const n = 1 << 20
	p, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Free(p) }()
	pin, err := c.HostAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.FreeHost(pin) }()
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(pin.Bytes[i:], uint64(i)*2654435761)
	}
	if err := c.CopyHtoDAsync(p, pin, 0, n); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, n)
	if err := c.CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if string(out) != string(pin.Bytes) {
		t.Fatal("device round trip changed the bytes")
	}
	if _, err := c.Alloc(1 << 62); err == nil {
		t.Fatal("an exabyte allocation succeeded")
	} else if e, ok := err.(*Error); !ok || e.Name == "" {
		t.Fatalf("allocation error %v is not a named CUresult", err)
	}
}

// TestNestedDo: a device call made inside a Do's function runs at once on the device thread
// (without it the call would wait for the Do it is inside of: a deadlock); calls from other
// goroutines meanwhile still hand off.
func TestNestedDo(t *testing.T) {
	c := openOrSkip(t)
	done := make(chan error, 1)
	go func() {
		done <- c.Do(func() error {
			tid := gettid()
			return c.Do(func() error {
				if gettid() != tid {
					return fmt.Errorf("nested Do ran on thread %d, the device's is %d", gettid(), tid)
				}
				return c.Sync()
			})
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Do inside a Do did not return in 10 s")
	}
	if err := c.Sync(); err != nil { // from this goroutine: handed off
		t.Fatal(err)
	}
}
