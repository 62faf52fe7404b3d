package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	want := []byte("weights\x00\x01\x02")
	full := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(full, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := File(full)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("mapped %q, want %q", data, want)
	}
	if err := unmap(); err != nil {
		t.Errorf("unmap: %v", err)
	}

	empty := filepath.Join(dir, "empty.bin")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	data, unmap, err = File(empty)
	if err != nil || len(data) != 0 {
		t.Errorf("empty file: %d bytes, err %v; want 0 bytes, nil", len(data), err)
	}
	if err := unmap(); err != nil {
		t.Errorf("unmap empty: %v", err)
	}

	if _, _, err := File(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
