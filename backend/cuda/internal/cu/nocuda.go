//go:build nocuda

package cu

import "errors"

func load() error {
	return errors.New("cuda: this binary was built with the nocuda tag (no driver loader)")
}

// proc is a driver function's name; nothing is loaded in this build.
type proc struct{ name string }

// call is never reached: every Context is opened after Load succeeded.
func call(p *proc, args ...uintptr) error { return load() }
