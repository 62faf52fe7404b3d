//go:build unix

package mmap

import (
	"encoding/binary"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestShared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counters")
	if err := CreateShared(path, 64, "TESTMAG1", 3, 5); err != nil {
		t.Fatal(err)
	}
	mem, err := OpenShared(path, 64, "TESTMAG1", 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(mem) != 64 || string(mem[:8]) != "TESTMAG1" || binary.LittleEndian.Uint32(mem[8:]) != 3 ||
		binary.LittleEndian.Uint32(mem[12:]) != 5 || strings.Trim(string(mem[16:]), "\x00") != "" {
		t.Fatalf("fresh file %q", mem)
	}
	// A second mapping sees the first one's writes: the mapping is shared.
	mem[20] = 7
	again, err := OpenShared(path, 64, "TESTMAG1", 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if again[20] != 7 {
		t.Errorf("second mapping reads %d, want 7", again[20])
	}
	// CreateShared replaces the file: live mappings keep the old one, a new open sees zeros.
	if err := CreateShared(path, 64, "TESTMAG1", 3, 5); err != nil {
		t.Fatal(err)
	}
	fresh, err := OpenShared(path, 64, "TESTMAG1", 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if fresh[20] != 0 || mem[20] != 7 {
		t.Errorf("after CreateShared: new mapping %d (want 0), old %d (want 7)", fresh[20], mem[20])
	}
	for _, m := range [][]byte{mem, again, fresh} {
		if err := syscall.Munmap(m); err != nil {
			t.Fatal(err)
		}
	}

	for _, c := range []struct {
		name  string
		size  int
		magic string
		a, b  uint32
		want  string
	}{
		{"size", 72, "TESTMAG1", 3, 5, "64 bytes, want 72"},
		{"magic", 64, "OTHERMG1", 3, 5, "header is"},
		{"a", 64, "TESTMAG1", 4, 5, "header is"},
		{"b", 64, "TESTMAG1", 3, 6, "header is"},
	} {
		if _, err := OpenShared(path, c.size, c.magic, c.a, c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s mismatch: err %v, want one saying %q", c.name, err, c.want)
		}
	}
	if _, err := OpenShared(filepath.Join(t.TempDir(), "missing"), 64, "TESTMAG1", 3, 5); err == nil {
		t.Error("missing file: no error")
	}
}
