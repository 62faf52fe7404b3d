package api

// The informational and operator routes added for vLLM/SGLang/OpenAI parity: /v1/models/{id},
// /version, /health_generate, and JSON 404/405 answers in OpenAI's error shape.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/llmserve/llmserve/internal/version"
	"github.com/llmserve/llmserve/sampling"
)

// HealthGenerateTimeout bounds /health_generate's one-token generation on every rank.
const HealthGenerateTimeout = 30 * time.Second

// extRoutes registers the routes of this file on mux, including the catch-all that answers
// unknown paths and methods as JSON.
func (s *Server) extRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/responses", generation(s, "/v1/responses", s.buildResponses))
	mux.HandleFunc("POST /v1/messages", anthropicErrors(generation(s, "/v1/messages", s.buildMessages)))
	mux.HandleFunc("POST /v1/messages/count_tokens", anthropicErrors(s.handleCountTokens))
	mux.HandleFunc("GET /v1/models/{id...}", s.handleModel)
	mux.HandleFunc("GET /version", s.handleVersion)
	mux.HandleFunc("GET /health_generate", s.handleHealthGenerate)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Only reached when no route matches the path and method: find out whether another
		// method would have matched (405) or the path is unknown (404).
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", allow[0])
			s.writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("method %s is not allowed on %s (use %s)", r.Method, r.URL.Path, allow[0]))
			return
		}
		s.writeError(w, http.StatusNotFound, &notFoundError{fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
}

// modelObject is one entry of /v1/models.
func (s *Server) modelObject() map[string]any {
	limit, _ := s.maxModelLen()
	return map[string]any{
		"id": s.cfg.ServedModelName, "object": "model", "created": s.created, "owned_by": "llmserve",
		"root": s.cfg.ServedModelName, "max_model_len": limit,
	}
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id != s.cfg.ServedModelName {
		s.writeError(w, http.StatusNotFound, &notFoundError{fmt.Sprintf("model %q does not exist; this server serves %q", id, s.cfg.ServedModelName)})
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": version.Version, "commit": version.Commit()})
}

// rankProbe is one rank's answer to /health_generate.
type rankProbe struct {
	Rank    int     `json:"rank"`
	Token   int32   `json:"token"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// handleHealthGenerate generates one token on every rank (a real forward and sample each), so a
// rank that reports load but cannot run its model is found.
func (s *Server) handleHealthGenerate(w http.ResponseWriter, r *http.Request) {
	if err := s.engine.Health(); err != nil {
		s.writeError(w, http.StatusServiceUnavailable, err)
		return
	}
	ranks := s.engine.Load().Dispatch.Ranks
	ctx, cancel := context.WithTimeout(r.Context(), HealthGenerateTimeout)
	defer cancel()
	probes := make([]rankProbe, len(ranks))
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Go(func() { probes[i] = s.probeRank(ctx, ranks[i].Rank) })
	}
	wg.Wait()
	var errs []error
	for _, p := range probes {
		if p.Error != "" {
			errs = append(errs, fmt.Errorf("rank %d: %s", p.Rank, p.Error))
		}
	}
	if len(errs) > 0 {
		s.writeError(w, http.StatusServiceUnavailable, fmt.Errorf("health_generate: %w", errors.Join(errs...)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "ranks": probes})
}

// probeRank runs a one-token greedy generation pinned to rank.
func (s *Server) probeRank(ctx context.Context, rank int) rankProbe {
	start := time.Now()
	p := rankProbe{Rank: rank, Token: -1}
	params := sampling.DefaultParams()
	params.Temperature = 0
	req := &Request{RID: s.engine.NewRID(), InputIDs: []int32{0}, Sampling: params, MaxNewTokens: 1,
		IgnoreEOS: true, SkipSpecialTokens: true, StreamInterval: 1, RoutedRank: rank, NoText: true}
	st, err := s.engine.Submit(ctx, req)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	d, err := s.collect(ctx, st)
	p.Seconds = time.Since(start).Seconds()
	switch {
	case err != nil:
		s.engine.Abort(st.RID)
		p.Error = fmt.Sprintf("no token within %v: %v", HealthGenerateTimeout, err)
	case d.Err != nil:
		p.Error = d.Err.Error()
	case len(d.IDs) != 1:
		p.Error = fmt.Sprintf("generated %d tokens, want 1", len(d.IDs))
	default:
		p.Token = d.IDs[0]
	}
	return p
}
