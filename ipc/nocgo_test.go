//go:build !cgo

package ipc

const cgoEnabled = false
