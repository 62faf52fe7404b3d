//go:build nocuda

package cu

import "errors"

func load() error {
	return errors.New("cuda: this binary was built with the nocuda tag (no driver loader)")
}

// call is never reached: every Context is opened after Load succeeded.
func call(p *proc, args ...uintptr) error { return load() }
