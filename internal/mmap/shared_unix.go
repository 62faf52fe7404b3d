//go:build unix

package mmap

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
)

// A shared file is a fixed-size, all-zero file of counters that several processes map
// read-write. Its first 16 bytes say what it is and its shape: an 8-byte magic, then two
// little-endian uint32 (such as a worker and a rank count).

// CreateShared writes a fresh shared file of size bytes at path. A new file is renamed over any
// old one, so that a process of a previous run that still maps the old file keeps writing
// there, not here.
func CreateShared(path string, size int, magic string, a, b uint32) error {
	if len(magic) != 8 || size < 16 {
		return fmt.Errorf("shared file: magic %q, %d bytes", magic, size)
	}
	buf := make([]byte, size)
	copy(buf, magic)
	binary.LittleEndian.PutUint32(buf[8:], a)
	binary.LittleEndian.PutUint32(buf[12:], b)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// OpenShared maps the shared file at path read-write, after checking that CreateShared made it
// with the same size, magic, a and b. The caller unmaps it with syscall.Munmap.
func OpenShared(path string, size int, magic string, a, b uint32) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != int64(size) {
		return nil, fmt.Errorf("%d bytes, want %d", st.Size(), size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	gotMagic, gotA, gotB := string(mem[:8]), binary.LittleEndian.Uint32(mem[8:]), binary.LittleEndian.Uint32(mem[12:])
	if gotMagic != magic || gotA != a || gotB != b {
		_ = syscall.Munmap(mem)
		return nil, fmt.Errorf("header is %q %d %d, want %q %d %d", gotMagic, gotA, gotB, magic, a, b)
	}
	return mem, nil
}
