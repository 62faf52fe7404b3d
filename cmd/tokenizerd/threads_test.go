package main

import "testing"

func TestWorkerThreads(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
	for _, c := range []struct{ flag, workers, ranks, cpus, want int }{
		{0, 1, 1, 2, 1},   // 2 cores: one for the rank, the worker gets 1 (detokd shares)
		{0, 1, 1, 16, 14}, // a big host: the rest after the rank and detokd
		{0, 2, 1, 16, 7},  // shared by the workers
		{0, 4, 8, 8, 1},   // never below 1
		{3, 4, 8, 8, 3},   // the flag wins
	} {
		if got := workerThreads(c.flag, c.workers, c.ranks, c.cpus); got != c.want {
			t.Errorf("workerThreads(%d, %d workers, %d ranks, %d cpus) = %d, want %d", c.flag, c.workers, c.ranks, c.cpus, got, c.want)
		}
	}
	t.Setenv("GOMAXPROCS", "5")
	if got := workerThreads(0, 1, 1, 16); got != 0 {
		t.Errorf("with GOMAXPROCS set in the environment: %d, want 0 (leave it)", got)
	}
}
