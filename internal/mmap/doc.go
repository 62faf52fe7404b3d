// Package mmap maps files into memory: weight files read-only, for the GGUF and safetensors
// readers, and shared counter files read-write, for the counters the engine's processes share
// (the dispatch ledger, the metrics store).
package mmap
