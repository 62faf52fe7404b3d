//go:build linux

package cu

import "syscall"

// gettid is the calling OS thread's id.
func gettid() int { return syscall.Gettid() }
