//go:build !linux

package main

import "syscall"

// processAttr puts a process in its own group, so signals reach what its shell starts. Only
// Linux can also tie its life to the runner's.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
