//go:build !unix

package mmap

import "os"

// File reads the whole file where syscall.Mmap is unavailable.
func File(path string) ([]byte, func() error, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
