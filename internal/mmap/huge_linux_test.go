package mmap

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// TestFileAdvisesHugePages: the weight mapping carries MADV_HUGEPAGE, which /proc/self/smaps
// shows as the "hg" flag of its VmFlags.
func TestFileAdvisesHugePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := File(path)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&data[0])))
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if strings.HasPrefix(line, start) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			if !slices.Contains(strings.Fields(line)[1:], "hg") {
				t.Errorf("mapping flags %q lack hg (MADV_HUGEPAGE)", line)
			}
			return
		}
	}
	t.Fatalf("mapping at %s not found in smaps", start)
}
