// Package mmap maps weight files read-only into memory, for the GGUF and safetensors readers.
package mmap
