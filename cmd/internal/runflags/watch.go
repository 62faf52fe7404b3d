package runflags

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// RunDirGone is the exit status of a process whose run directory was deleted or replaced
// while it ran: a restart (the supervisor's) recreates the directory and binds afresh.
const RunDirGone = 1

// WatchRunDir checks every interval that the run-dir locks this process holds (LockRunDir) are
// still the files at their paths. When the run directory is deleted (or replaced) under a live
// engine, every socket bound in it is unreachable, and a process that carried on would look
// ready while nobody could reach it; instead the process logs the directory and exits, so its
// supervisor restarts it on a fresh one and the engine recovers (each process watching its
// own). A process holding no lock watches nothing.
func WatchRunDir(interval time.Duration, log *slog.Logger) {
	locks := append([]*os.File(nil), heldLocks...)
	if len(locks) == 0 {
		return
	}
	go func() {
		for range time.Tick(interval) {
			for _, f := range locks {
				if lost(f) {
					log.Error("the run directory was deleted or replaced under this process: exiting, to be restarted on a fresh one",
						"run_dir", filepath.Dir(f.Name()), "lock", f.Name())
					os.Exit(RunDirGone)
				}
			}
		}
	}()
}

// lost reports whether f is no longer the file at its path.
func lost(f *os.File) bool {
	held, err := f.Stat()
	if err != nil {
		return true
	}
	now, err := os.Stat(f.Name())
	return err != nil || !os.SameFile(held, now)
}
