package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// With API keys set (API_KEY in the environment, like the other settings, and a key file), a
// request without a valid "Authorization: Bearer" key gets a 401; /health and /metrics stay open
// by default.
func TestAPIKeys(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("# operators\nfilekey-1\n\nfilekey-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("API_KEY", "envkey")
	e := startEngine(t, engineOpts{workers: 1, tokArgs: []string{"--api-key-file", keyFile}})
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, e.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	gen := `{"input_ids":[328,287,576],"sampling_params":{"max_new_tokens":2,"temperature":0}}`
	for _, c := range []struct {
		method, path, auth, body string
		want                     int
	}{
		{"POST", "/generate", "", gen, 401},
		{"POST", "/generate", "Bearer wrong", gen, 401},
		{"POST", "/generate", "Bearer envke", gen, 401},
		{"POST", "/generate", "envkey", gen, 401},
		{"POST", "/v1/completions", "", `{"prompt":"x","max_tokens":2}`, 401},
		{"GET", "/v1/models", "", "", 401},
		{"GET", "/get_load", "", "", 401},
		{"POST", "/tokenize", "", `{"text":"x"}`, 401},
		{"POST", "/generate", "Bearer envkey", gen, 200},
		{"POST", "/generate", "Bearer filekey-1", gen, 200},
		{"POST", "/generate", "Bearer filekey-2", gen, 200},
		{"GET", "/v1/models", "Bearer filekey-2", "", 200},
		{"GET", "/health", "", "", 200},
		{"GET", "/metrics", "", "", 200},
	} {
		code, body := do(c.method, c.path, c.auth, c.body)
		if code != c.want {
			t.Errorf("%s %s with %q: %d %.200s, want %d", c.method, c.path, c.auth, code, body, c.want)
		}
		if code == 401 && !strings.Contains(body, "API key") {
			t.Errorf("401 body %q does not say why", body)
		}
	}
}
