// Package version names the build every binary and the HTTP API report (--version, /version):
// the module version and, when built from a git checkout, the commit it was built from.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is the release this tree is; builds from a checkout add the commit (String).
const Version = "0.1.0"

var (
	once   sync.Once
	commit string // vcs.revision of the build, "" when unknown
	dirty  bool   // vcs.modified: the build had uncommitted changes
)

func read() {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
}

// Commit is the git commit the binary was built from ("" when the build did not record one),
// with "-dirty" when the tree had uncommitted changes.
func Commit() string {
	once.Do(read)
	if commit != "" && dirty {
		return commit + "-dirty"
	}
	return commit
}

// String is Version, then the commit in parentheses when known.
func String() string {
	if c := Commit(); c != "" {
		return Version + " (" + c + ")"
	}
	return Version
}
