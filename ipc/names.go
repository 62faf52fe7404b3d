package ipc

import "strconv"

// The sockets of one engine, named inside its run directory. Each is bound by the process that
// reads from it: a scheduler binds its request socket, detokd its input, each tokenizer worker
// its output socket; writers connect.

// SchedulerEndpoint is where DP rank r receives GenerateRequests and Aborts.
func SchedulerEndpoint(dir string, rank int) string {
	return Endpoint(dir, "sched-"+strconv.Itoa(rank)+".sock")
}

// DetokEndpoint is where detokd receives every rank's TokenBatches.
func DetokEndpoint(dir string) string { return Endpoint(dir, "detok.sock") }

// WorkerEndpoint is where tokenizer worker w receives its requests' outputs.
func WorkerEndpoint(dir string, worker int) string {
	return Endpoint(dir, "worker-"+strconv.Itoa(worker)+".sock")
}
