package api

import (
	"strings"
	"testing"
)

// TestStructuralTagResponseFormat: both structural-tag shapes become a composed constraint on
// chat and completions; a malformed one is a 400 naming response_format and the reason.
func TestStructuralTagResponseFormat(t *testing.T) {
	e, ts := newGBNFServer(t)
	for _, rf := range []string{
		`{"type":"structural_tag","structures":[{"begin":"<f=a>","schema":{"type":"object"},"end":"</f>"}],"triggers":["<f="]}`,
		`{"type":"structural_tag","format":{"type":"triggered_tags","triggers":["<f="],"tags":[{"begin":"<f=a>","content":{"type":"json_schema","json_schema":{"type":"object"}},"end":"</f>"}]}}`,
	} {
		for _, body := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"response_format":` + rf + `}`},
			{"/v1/completions", `{"prompt":"hi","max_tokens":1,"response_format":` + rf + `}`},
		} {
			resp, b := post(t, ts, body.path, body.body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s %s: %d %s", body.path, rf, resp.StatusCode, b)
			}
			if req := e.lastRequest(); req.GrammarKind != GrammarCompose || !strings.Contains(req.GrammarSpec, `"without_any":["\u003cf="]`) {
				t.Fatalf("%s: kind %v spec %s", rf, req.GrammarKind, req.GrammarSpec)
			}
		}
	}
	for rf, want := range map[string]string{
		`{"type":"structural_tag","structures":[{"begin":"<g>","schema":{},"end":"</g>"}],"triggers":["<f="]}`: "starts with none of the triggers",
		`{"type":"structural_tag","format":{"type":"nope"}}`:                                                   `format.type \"nope\" is not supported`,
		`{"type":"structural_tag"}`: "structures must be",
	} {
		resp, b := post(t, ts, "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"response_format":`+rf+`}`)
		if resp.StatusCode != 400 || !strings.Contains(b, "response_format") || !strings.Contains(b, want) {
			t.Errorf("%s: %d %s, want a 400 naming response_format and %q", rf, resp.StatusCode, b, want)
		}
	}
	// /v1/responses' text.format has no structural-tag shape: a 400 naming the field
	for _, body := range []string{
		`{"input":"hi","text":{"format":{"type":"structural_tag","structures":[{"begin":"<a>","schema":{},"end":"</a>"}],"triggers":["<"]}}}`,
		`{"input":"hi","text":{"format":{"type":"structural_tag"}}}`,
	} {
		resp, b := post(t, ts, "/v1/responses", body)
		if resp.StatusCode != 400 || !strings.Contains(b, "text.format") {
			t.Errorf("%s: %d %s, want a 400 naming text.format", body, resp.StatusCode, b)
		}
		t.Logf("%s", b)
	}
}
