//go:build linux

package main

import "syscall"

// processAttr puts a process in its own group, so signals reach what its shell starts, and has
// the kernel send it SIGTERM (a drain) if this runner dies without stopping it, killed with
// SIGKILL say: an engine left behind would hold its port and run directory, and the next start
// would refuse with status 78. The signal follows an exec, which is how the Procfile starts each
// binary; the kernel ties it to the thread that forked, and Go ends no thread of a program that
// never locks one.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
