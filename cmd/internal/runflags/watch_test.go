package runflags

import (
	"os"
	"path/filepath"
	"testing"
)

// A held lock is lost when its run directory is deleted, or replaced by a new one holding a
// file of the same name; while the directory stands it is not.
func TestLockLost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "x.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if lost(f) {
		t.Fatal("lost while the run dir stands")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if !lost(f) {
		t.Fatal("not lost after the run dir was deleted")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !lost(f) {
		t.Fatal("not lost after the run dir was replaced")
	}
}
