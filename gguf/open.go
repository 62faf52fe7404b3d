package gguf

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/llmserve/llmserve/internal/mmap"
)

// Open maps the GGUF file at path and parses it. Tensor data views point into the mapping and
// stay valid until Close.
func Open(path string) (*File, error) {
	data, unmap, err := mmap.File(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f.closer = unmap
	return f, nil
}

// IsGGUF reports whether path is a regular file that starts with the GGUF magic. It is how a
// --model-path is told apart from a Hugging Face directory.
func IsGGUF(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	var magic [4]byte
	if _, err := io.ReadFull(fh, magic[:]); err != nil {
		return false
	}
	return bytes.Equal(magic[:], []byte(Magic))
}

// CheckNotFile returns an error when path is a file that is not a GGUF file, so a model path
// that is neither a directory nor GGUF is reported as what it is (say, a GGUF file whose magic
// is wrong) instead of as a missing file inside it; nil otherwise.
func CheckNotFile(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.IsDir() {
		return nil
	}
	var magic [4]byte
	n := 0
	if fh, err := os.Open(path); err == nil {
		n, _ = io.ReadFull(fh, magic[:])
		fh.Close()
	}
	if n == len(magic) && bytes.Equal(magic[:], []byte(Magic)) {
		return nil
	}
	return fmt.Errorf("model path %s is a file but not a GGUF file (bad magic %q, want %q) and not a model directory", path, magic[:n], Magic)
}
