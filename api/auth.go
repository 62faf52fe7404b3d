package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// DefaultOpenPaths are the paths that need no API key by default: the probes of load balancers
// and orchestrators, and the metrics scraper.
var DefaultOpenPaths = []string{"/health", "/health_generate", "/metrics"}

// authenticate wraps h so that, when keys are set, every request but those to open paths must
// carry "Authorization: Bearer KEY" (or, as Anthropic's clients send it, "x-api-key: KEY") with one
// of the keys; others get a 401. Keys are compared as
// SHA-256 digests in constant time, so neither a key's bytes nor its length leak through timing.
func (s *Server) authenticate(h http.Handler) http.Handler {
	if len(s.cfg.APIKeys) == 0 {
		return h
	}
	digests := make([][sha256.Size]byte, len(s.cfg.APIKeys))
	for i, k := range s.cfg.APIKeys {
		digests[i] = sha256.Sum256([]byte(k))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(s.cfg.OpenPaths, r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		token, ok := requestKey(r.Header)
		got := sha256.Sum256([]byte(token))
		match := 0
		for i := range digests {
			match |= subtle.ConstantTimeCompare(got[:], digests[i][:])
		}
		if !ok || match != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmserve"`)
			s.writeError(w, http.StatusUnauthorized, errUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

var errUnauthorized = errors.New("missing or invalid API key: send Authorization: Bearer <key>")

// requestKey is the key a request carries: the Bearer credentials of its Authorization header,
// or, with no Authorization header, its x-api-key header (what the Anthropic SDK sends).
func requestKey(h http.Header) (string, bool) {
	if a := h.Get("Authorization"); a != "" {
		return bearerToken(a)
	}
	k := strings.TrimSpace(h.Get("X-Api-Key"))
	return k, k != ""
}

// bearerToken reads the credentials of an Authorization header with the Bearer scheme, whose
// name is case-insensitive (RFC 9110, section 11.1): "bearer KEY" is as good as "Bearer KEY".
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}
