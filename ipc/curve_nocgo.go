//go:build !cgo

package ipc

import (
	"fmt"
	"log/slog"
	"time"
)

// NewCurveKeys fails: key generation is libzmq's.
func NewCurveKeys() (*CurveKeys, error) { return nil, fmt.Errorf("keygen %w", ErrNeedsCgo) }

// check cannot derive the public key without libzmq; Probe and the sockets refuse CURVE anyway.
func (k *CurveKeys) check() error { return nil }

// SetSecurityLogger does nothing: this build has no CURVE servers.
func SetSecurityLogger(*slog.Logger) {}

// Probe fails for tcp:// endpoints: this build cannot reach other hosts.
func Probe(endpoint string, _ *CurveKeys, _ time.Duration) error {
	network, _, err := splitEndpoint(endpoint)
	if err != nil || network != "tcp" {
		return err
	}
	return fmt.Errorf("ipc: %s: %w", endpoint, ErrNeedsCgo)
}
