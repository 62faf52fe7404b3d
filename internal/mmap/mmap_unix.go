//go:build unix

package mmap

import (
	"fmt"
	"os"
	"syscall"
)

// File maps path read-only and shared, so the page cache holds the file once however many views
// of it the process keeps, and the Go heap holds none of it. The returned function unmaps it.
func File(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size == 0 {
		// mmap rejects empty files; the parser reports the real problem.
		return []byte{}, func() error { return nil }, nil
	}
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	adviseHuge(data)
	return data, func() error { return syscall.Munmap(data) }, nil
}
