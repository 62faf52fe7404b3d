package ipc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// CurveKeys is the CURVE identity of one engine: every process of it holds the same keypair
// (a Kubernetes Secret, or a directory written by `schedulerd keygen`). A process binding a tcp://
// socket is the CURVE server with the secret key and admits (ZAP) only clients that prove they
// hold the same keypair; a process connecting is the client, with the public key as the
// server's. A peer without the secret key cannot complete the handshake, and one that knows the
// public key but not the secret is refused by ZAP; both are logged.
type CurveKeys struct {
	// Public and Secret are the Z85 texts (40 characters each).
	Public, Secret string
}

// Key file names inside a key directory.
const (
	CurvePublicFile = "curve.pub"
	CurveSecretFile = "curve.key"
)

// LoadCurveKeys reads a key directory written by WriteCurveKeys.
func LoadCurveKeys(dir string) (*CurveKeys, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("curve keys: %w", err)
		}
		k := strings.TrimSpace(string(b))
		if len(k) != 40 || !isZ85(k) {
			return "", fmt.Errorf("curve keys: %s: want a 40-character Z85 key", filepath.Join(dir, name))
		}
		return k, nil
	}
	pub, err := read(CurvePublicFile)
	if err != nil {
		return nil, err
	}
	sec, err := read(CurveSecretFile)
	if err != nil {
		return nil, err
	}
	k := &CurveKeys{Public: pub, Secret: sec}
	if err := k.check(); err != nil {
		return nil, fmt.Errorf("curve keys in %s: %w", dir, err)
	}
	return k, nil
}

// WriteCurveKeys writes k into dir (created 0700): the public key world-readable, the secret
// key 0600. Existing keys are never overwritten.
func WriteCurveKeys(dir string, k *CurveKeys) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	for _, f := range []struct {
		name, text string
		mode       os.FileMode
	}{{CurveSecretFile, k.Secret, 0o600}, {CurvePublicFile, k.Public, 0o644}} {
		fh, err := os.OpenFile(filepath.Join(dir, f.name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return fmt.Errorf("keygen: %w", err)
		}
		_, err = fh.WriteString(f.text + "\n")
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("keygen: write %s: %w", f.name, err)
		}
	}
	return nil
}

// z85Chars is ZeroMQ's Z85 alphabet (RFC 32).
const z85Chars = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

func isZ85(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(z85Chars, rune(s[i])) {
			return false
		}
	}
	return true
}

// ErrNeedsCgo is returned by the pure-Go transport for what only libzmq can do here.
var ErrNeedsCgo = errors.New("needs the libzmq transport of a cgo build (CGO_ENABLED=1 with libzmq3-dev): the pure-Go transport has no CURVE")

// isLoopbackHost reports whether host (of a tcp endpoint) names this host only.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
