package api

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The chat page, the reference and the OpenAPI document are served, self-contained, and every
// documented route is one the server routes.
func TestPageAndOpenAPI(t *testing.T) {
	ts := newTestServer(t, &feedEngine{}, 1)
	get := func(path string) (int, string, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	for _, p := range []string{"/", "/docs"} {
		code, ct, body := get(p)
		if code != 200 || !strings.HasPrefix(ct, "text/html") || !strings.Contains(body, "<script>") {
			t.Fatalf("GET %s: %d %s", p, code, ct)
		}
		for _, ext := range []string{"http://", "https://", "src=\"/", "<link"} {
			if strings.Contains(body, ext) {
				t.Errorf("GET %s refers to an external asset (%q)", p, ext)
			}
		}
	}
	if code, _, _ := get("/nowhere"); code != 404 {
		t.Fatalf("an unknown path under / answers %d, want 404", code)
	}
	code, _, body := get("/openapi.json")
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json: %d %.200s", code, body)
	}
	for _, r := range routes {
		if doc.Paths[r.path][lower(r.method)] == nil {
			t.Errorf("%s %s missing from openapi.json", r.method, r.path)
		}
		path := strings.Replace(r.path, "{id}", "m", 1)
		req, _ := http.NewRequest(r.method, ts.URL+path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "no route") || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("documented %s %s is not routed: %d %s", r.method, r.path, resp.StatusCode, b)
		}
	}
}
