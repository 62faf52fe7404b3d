package api

// The browser routes: a chat page at GET / and the API reference at GET /docs, both static pages
// embedded in the binary (no external assets), and GET /openapi.json describing every route.

import (
	"embed"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/llmserve/llmserve/internal/version"
)

//go:embed static/index.html static/docs.html
var static embed.FS

// pageRoutes registers the page, the reference and the OpenAPI document on mux.
func (s *Server) pageRoutes(mux *http.ServeMux) {
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := static.ReadFile(name)
			if err != nil { // embedded at build time: cannot happen
				s.writeError(w, http.StatusInternalServerError, err)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
			_, _ = w.Write(b)
		}
	}
	mux.HandleFunc("GET /{$}", page("static/index.html"))
	mux.HandleFunc("GET /docs", page("static/docs.html"))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDocument())
	})
}

// route is one documented route.
type route struct {
	method, path, summary string
	// body is the request body's schema (nil: none).
	body map[string]any
}

// prop is a schema property of type typ with a description.
func prop(typ, desc string) map[string]any { return map[string]any{"type": typ, "description": desc} }

// anyOf is a property of any of the given types.
func anyOf(desc string, types ...string) map[string]any {
	return map[string]any{"type": types, "description": desc}
}

// object is an object schema with properties and required names.
func object(props map[string]any, required ...string) map[string]any {
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// samplingProps are the OpenAI sampling fields the completion and chat routes share.
func samplingProps(extra map[string]any) map[string]any {
	p := map[string]any{
		"model":             prop("string", "the served model's id (GET /v1/models); optional"),
		"max_tokens":        prop("integer", "most tokens to generate; prompt + max_tokens must fit max_model_len"),
		"temperature":       prop("number", "0 is greedy; default from the model's generation_config.json"),
		"top_p":             prop("number", "nucleus sampling, (0, 1]"),
		"top_k":             prop("integer", "sample from the k most likely tokens (-1: all)"),
		"min_p":             prop("number", "drop tokens below min_p times the most likely one's probability"),
		"n":                 prop("integer", "choices to generate"),
		"stream":            prop("boolean", "answer as server-sent events"),
		"stop":              anyOf("stop strings (up to 4)", "string", "array"),
		"seed":              prop("integer", "makes sampling reproducible"),
		"presence_penalty":  prop("number", "[-2, 2]"),
		"frequency_penalty": prop("number", "[-2, 2]"),
		"logprobs":          anyOf("log probabilities of the chosen tokens", "boolean", "integer"),
		"response_format":   prop("object", `structured output: {"type":"json_object"} or {"type":"json_schema","json_schema":{"name":...,"schema":{...}}}`),
	}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// routes are the documented routes, in the order of the document.
var routes = []route{
	{"GET", "/", "chat page (HTML): streaming chat with the served model", nil},
	{"GET", "/docs", "this API reference (HTML), rendered from /openapi.json", nil},
	{"GET", "/openapi.json", "this document", nil},
	{"POST", "/v1/chat/completions", "OpenAI chat completion", object(samplingProps(map[string]any{
		"messages":    prop("array", `the conversation: [{"role":"system"|"user"|"assistant"|"tool","content":...}]`),
		"tools":       prop("array", "functions the model may call"),
		"tool_choice": anyOf(`"auto", "none", "required" or a named function`, "string", "object"),
	}), "messages")},
	{"POST", "/v1/completions", "OpenAI text completion", object(samplingProps(map[string]any{
		"prompt": anyOf("a string, an array of token ids, or a batch of either", "string", "array"),
		"echo":   prop("boolean", "prepend the prompt to the text"),
	}), "prompt")},
	{"POST", "/v1/responses", "OpenAI Responses API (stateless: input and instructions)", object(map[string]any{
		"input":             anyOf("a string or an array of input items", "string", "array"),
		"instructions":      prop("string", "a system message"),
		"max_output_tokens": prop("integer", "most tokens to generate"),
		"stream":            prop("boolean", "answer as server-sent events"),
		"temperature":       prop("number", "0 is greedy"),
		"tools":             prop("array", "functions the model may call"),
	}, "input")},
	{"GET", "/v1/models", "the served model, with max_model_len (what the context and the KV cache can hold)", nil},
	{"GET", "/v1/models/{id}", "one model", nil},
	{"POST", "/generate", "SGLang-style native generation on text or token ids", object(map[string]any{
		"text":            anyOf("the prompt as text (or a batch)", "string", "array"),
		"input_ids":       prop("array", "the prompt as token ids (or a batch)"),
		"sampling_params": prop("object", "max_new_tokens, temperature, top_p, top_k, stop, json_schema, regex, ..."),
		"stream":          prop("boolean", "answer as server-sent events"),
		"rid":             anyOf("the request id", "string", "array"),
	})},
	{"POST", "/tokenize", "text (or chat messages) to token ids", object(map[string]any{
		"prompt":   prop("string", "text to tokenize"),
		"messages": prop("array", "chat messages to render with the chat template and tokenize"),
	})},
	{"POST", "/detokenize", "token ids to text", object(map[string]any{"tokens": prop("array", "token ids")}, "tokens")},
	{"GET", "/health", "200 when every rank answers", nil},
	{"GET", "/health_generate", "200 when every rank generates a token", nil},
	{"GET", "/get_load", "each rank's load as this worker knows it", nil},
	{"GET", "/version", "the build", nil},
	{"GET", "/metrics", "Prometheus metrics (text format 0.0.4)", nil},
}

// openAPIDocument is the OpenAPI 3.1 document of routes, built once.
var openAPIDocument = sync.OnceValue(func() []byte {
	paths := map[string]any{}
	for _, r := range routes {
		ops, _ := paths[r.path].(map[string]any)
		if ops == nil {
			ops = map[string]any{}
			paths[r.path] = ops
		}
		op := map[string]any{
			"summary": r.summary,
			"responses": map[string]any{
				"200": map[string]any{"description": "success"},
				"400": map[string]any{"description": `invalid request: {"error":{"message":...,"param":...}} naming the field`},
			},
		}
		if r.body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": r.body}}}
		}
		ops[lower(r.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "llmserve", "version": version.String(),
			"description": "OpenAI-compatible and SGLang-style HTTP API of the llmserve engine. With API keys set, send Authorization: Bearer KEY."},
		"paths": paths,
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
})

// lower is an HTTP method's name as OpenAPI keys it.
func lower(method string) string {
	if method == http.MethodPost {
		return "post"
	}
	return "get"
}
