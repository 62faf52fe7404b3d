package api

// /v1/embeddings in OpenAI's shape. Each input becomes one embedding request (Request.Pooling):
// the rank runs its prompt through the model with no sampling and returns the pooled final
// hidden state; here it is truncated to `dimensions` (Matryoshka models only) and normalized as
// the model's configuration says, then written as floats or as base64 of little-endian float32s
// (what the OpenAI SDKs ask for by default).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// EmbeddingConfig is how /v1/embeddings pools and post-processes (cmd/tokenizerd fills it from
// the model directory's sentence-transformers files and --pooling).
type EmbeddingConfig struct {
	// Pooling is how a prompt's hidden states become one vector (PoolingNone: PoolingLast).
	Pooling Pooling
	// SkipNormalize leaves vectors as pooled; by default they are scaled to unit length.
	SkipNormalize bool
	// Size is the model's hidden size, the length of a full embedding (0: unknown, and then
	// dimensions is refused).
	Size int
	// Matryoshka says the model was trained so that a prefix of its embedding is an embedding
	// (config.json's is_matryoshka or matryoshka_dimensions): only then is dimensions honoured.
	Matryoshka bool
	// MatryoshkaDims, when set, are the only dimensions allowed.
	MatryoshkaDims []int
	// Unavailable, when set, is why this model serves no embeddings (a pooling this engine does
	// not implement); every request gets a 400 with it.
	Unavailable string
}

// MaxEmbeddingInputs bounds the inputs of one request, as OpenAI's API does.
const MaxEmbeddingInputs = 2048

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     *int            `json:"dimensions"`
	EncodingFormat *string         `json:"encoding_format"`
	// User is accepted and ignored (policy.go).
	User json.RawMessage `json:"user"`
	// Priority orders the rank's queue under --scheduling-policy priority.
	Priority json.RawMessage `json:"priority"`
}

func (b *embeddingRequest) ignoredNames() []string {
	var out []string
	if len(b.User) > 0 && string(b.User) != "null" {
		out = append(out, "user")
	}
	if len(b.Priority) > 0 && string(b.Priority) != "null" {
		out = append(out, "priority") // under fcfs (reportIgnored drops it under priority)
	}
	return out
}

// embeddingParams is a validated request: its inputs as token ids and how to write the output.
type embeddingParams struct {
	inputs   [][]int32
	dims     int // output length
	base64   bool
	priority int
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.met.requests["/v1/embeddings"].Inc()
	var body embeddingRequest
	if err := s.decodeBody(w, r, &body); err != nil {
		s.fail(w, err)
		return
	}
	p, err := s.buildEmbeddings(&body)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.reportIgnored(w, "/v1/embeddings", &body)
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if s.stopping.Err() != nil {
		s.fail(w, errShuttingDown)
		return
	}
	vecs, usage, err := s.runEmbeddings(r.Context(), p, start)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		var bre *BadRequestError
		switch {
		case errors.As(err, &bre):
			s.fail(w, err)
		case errors.Is(err, errShuttingDown) || errors.Is(err, ErrOverloaded):
			s.fail(w, err)
		default:
			s.writeError(w, http.StatusInternalServerError, err)
		}
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(s.writeDeadline())
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.embeddingsJSON(vecs, usage, p))
}

// buildEmbeddings validates a body before any work: the model, the format, the dimensions, then
// the inputs (tokenized, each within the context).
func (s *Server) buildEmbeddings(body *embeddingRequest) (*embeddingParams, error) {
	if err := s.checkModel(body.Model); err != nil {
		return nil, err
	}
	ec := &s.cfg.Embeddings
	if ec.Unavailable != "" {
		return nil, badRequest("", "this model serves no embeddings: "+ec.Unavailable)
	}
	p := &embeddingParams{dims: ec.Size}
	if f := body.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			p.base64 = true
		default:
			return nil, badRequest("encoding_format", fmt.Sprintf("must be float or base64, got %q", clip(*f)))
		}
	}
	if d := body.Dimensions; d != nil {
		if err := s.checkDimensions(*d); err != nil {
			return nil, err
		}
		p.dims = *d
	}
	var err error
	if p.priority, err = parsePriority(body.Priority); err != nil {
		return nil, err
	}
	inputs, err := s.parseEmbeddingInputs(body.Input)
	if err != nil {
		return nil, err
	}
	p.inputs = inputs
	return p, nil
}

// checkDimensions refuses a dimensions value the model cannot give.
func (s *Server) checkDimensions(d int) error {
	ec := &s.cfg.Embeddings
	switch {
	case ec.Size == 0:
		return badRequest("dimensions", "this server does not know the model's embedding size; leave dimensions out")
	case d < 1 || d > ec.Size:
		return badRequest("dimensions", fmt.Sprintf("must be in [1, %d] (the model's embedding size), got %d", ec.Size, d))
	case d == ec.Size:
		return nil
	case !ec.Matryoshka:
		return badRequest("dimensions", fmt.Sprintf("the model's embeddings have %d dimensions and it is not a Matryoshka model, so they cannot be shortened (got %d)", ec.Size, d))
	case len(ec.MatryoshkaDims) > 0 && !slices.Contains(ec.MatryoshkaDims, d):
		return badRequest("dimensions", fmt.Sprintf("must be one of the model's Matryoshka dimensions %v, got %d", ec.MatryoshkaDims, d))
	}
	return nil
}

// parseEmbeddingInputs reads OpenAI's input: a string, an array of strings, an array of token
// ids, or an array of token-id arrays. Each input must hold at least one token and fit in the
// context; a token array is refused at its first id over the context.
func (s *Server) parseEmbeddingInputs(raw json.RawMessage) ([][]int32, error) {
	const shape = "must be a string, an array of strings, an array of token ids, or an array of token-id arrays"
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "is required")
	}
	var inputs [][]int32
	var text string
	switch {
	case json.Unmarshal(raw, &text) == nil:
		ids, err := s.embeddingText(text, "input")
		if err != nil {
			return nil, err
		}
		inputs = [][]int32{ids}
	case raw[0] != '[':
		return nil, badRequest("input", shape)
	default:
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, badRequest("input", shape)
		}
		if len(items) == 0 {
			return nil, badRequest("input", "is an empty array")
		}
		first := bytes.TrimSpace(items[0])
		if len(first) > 0 && (first[0] == '-' || first[0] >= '0' && first[0] <= '9') {
			ids, err := s.embeddingIDs(raw, "input")
			if err != nil {
				return nil, err
			}
			inputs = [][]int32{ids}
			break
		}
		if len(items) > MaxEmbeddingInputs {
			return nil, badRequest("input", fmt.Sprintf("holds at most %d inputs, got %d", MaxEmbeddingInputs, len(items)))
		}
		texts := len(first) > 0 && first[0] == '"' // a batch is all strings or all token arrays
		for i, it := range items {
			param := "input[" + strconv.Itoa(i) + "]"
			it = bytes.TrimSpace(it)
			var ids []int32
			var err error
			switch {
			case len(it) > 0 && (it[0] == '"') != texts && (it[0] == '"' || it[0] == '['):
				return nil, badRequest(param, "mixes strings and token arrays in one batch: send one kind")
			case len(it) > 0 && it[0] == '"':
				var t string
				if err := json.Unmarshal(it, &t); err != nil {
					return nil, badRequest(param, "is not a valid string")
				}
				ids, err = s.embeddingText(t, param)
			case len(it) > 0 && it[0] == '[':
				ids, err = s.embeddingIDs(it, param)
			default:
				return nil, badRequest(param, "must be a string or an array of token ids ("+"input "+shape+")")
			}
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, ids)
		}
	}
	return inputs, nil
}

// embeddingText tokenizes one text input.
func (s *Server) embeddingText(text, param string) ([]int32, error) {
	if text == "" {
		return nil, badRequest(param, "is an empty string")
	}
	if err := s.needTokenizer("a text input"); err != nil {
		return nil, err
	}
	if err := s.checkTextFits(len(text), param); err != nil {
		return nil, err
	}
	ids := s.engine.Tokenizer().Encode(text, true)
	return ids, s.checkEmbeddingLen(ids, param)
}

// embeddingIDs reads one token-id input, refused at the first id over the context.
func (s *Server) embeddingIDs(raw json.RawMessage, param string) ([]int32, error) {
	limit, kv := s.maxModelLen()
	ids, err := parseTokenIDs(raw, param, limit)
	if err != nil {
		var bre *BadRequestError
		if errors.As(err, &bre) && len(bre.Msg) > 9 && bre.Msg[:9] == "more than" {
			bre.Msg += "; the limit is " + lengthLimit(limit, kv)
		}
		return nil, err
	}
	if err := s.checkIDRange(ids, param); err != nil {
		return nil, err
	}
	return ids, s.checkEmbeddingLen(ids, param)
}

// checkEmbeddingLen refuses an input with no tokens or more than a request may hold (an
// embedding generates nothing, so the whole of it is the prompt's).
func (s *Server) checkEmbeddingLen(ids []int32, param string) error {
	limit, kv := s.maxModelLen()
	switch {
	case len(ids) == 0:
		return badRequest(param, "has no tokens")
	case len(ids) > limit:
		return badRequest(param, fmt.Sprintf("has %d tokens, more than %s", len(ids), lengthLimit(limit, kv)))
	}
	return nil
}

// runEmbeddings submits every input, waits for all of them and returns their vectors
// (truncated and normalized) and the prompt tokens they used. A refusal or failure of one aborts
// the rest.
func (s *Server) runEmbeddings(ctx context.Context, p *embeddingParams, start time.Time) ([][]float32, int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.stopping, func() { cancel(errShuttingDown) })
	defer stop()
	pooling := s.cfg.Embeddings.Pooling
	if pooling == PoolingNone {
		pooling = PoolingLast
	}
	streams := make([]*Stream, 0, len(p.inputs))
	finished := make([]bool, len(p.inputs))
	defer func() {
		for i, st := range streams {
			if !finished[i] && !st.Done() {
				s.engine.Abort(st.RID)
			}
		}
	}()
	for _, ids := range p.inputs {
		req := &Request{RID: s.engine.NewRID(), InputIDs: ids, Pooling: pooling, NoText: true, RoutedRank: -1, Priority: p.priority}
		st, err := s.engine.Submit(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		streams = append(streams, st)
	}
	vecs := make([][]float32, len(streams))
	tokens := 0
	for i, st := range streams {
		d, err := s.collect(ctx, st)
		if err != nil {
			if c := context.Cause(ctx); c != nil {
				err = c
			}
			return nil, 0, err
		}
		finished[i] = true
		s.met.finished(&d, st, start)
		if d.Err != nil {
			if errors.As(d.Err, new(*BadRequestError)) { // the rank refused the input as the client's fault
				return nil, 0, fmt.Errorf("input %d: %w", i, d.Err)
			}
			return nil, 0, fmt.Errorf("embedding of input %d failed: %w", i, d.Err)
		}
		if d.FinishReason != FinishStop {
			return nil, 0, fmt.Errorf("embedding of input %d ended with %s before its vector", i, d.FinishReason)
		}
		if err := checkVector(d.Embedding, s.cfg.Embeddings.Size, p.dims); err != nil {
			return nil, 0, fmt.Errorf("embedding of input %d: %w", i, err)
		}
		vecs[i] = finishEmbedding(d.Embedding, p.dims, !s.cfg.Embeddings.SkipNormalize)
		tokens += d.PromptTokens
	}
	return vecs, tokens, nil
}

// checkVector refuses a vector from the rank that is not of the model's size (size 0: unknown),
// is shorter than the dimensions asked for, or holds a value JSON cannot carry.
func checkVector(v []float32, size, dims int) error {
	if len(v) == 0 || size > 0 && len(v) != size || len(v) < dims {
		return fmt.Errorf("the rank returned %d floats, want %d", len(v), max(size, dims))
	}
	for j, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("the model's hidden state holds %v at %d", x, j)
		}
	}
	return nil
}

// finishEmbedding truncates v to dims (0: whole) and scales it to unit length when normalize
// is set (after the truncation: a Matryoshka prefix is renormalized).
func finishEmbedding(v []float32, dims int, normalize bool) []float32 {
	if dims > 0 && dims < len(v) {
		v = v[:dims]
	}
	if normalize {
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		// As torch.nn.functional.normalize: a zero vector stays zero.
		if n := math.Sqrt(ss); n > 1e-12 {
			for i, x := range v {
				v[i] = float32(float64(x) / n)
			}
		}
	}
	return v
}

// embeddingsJSON writes the response: one object per input, in input order.
func (s *Server) embeddingsJSON(vecs [][]float32, tokens int, p *embeddingParams) []byte {
	out := []byte(`{"object":"list","data":[`)
	var raw []byte
	for i, v := range vecs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":`...)
		if p.base64 {
			raw = raw[:0]
			for _, x := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
			}
			out = append(out, '"')
			out = base64.StdEncoding.AppendEncode(out, raw)
			out = append(out, '"')
		} else {
			out = append(out, '[')
			for j, x := range v {
				if j > 0 {
					out = append(out, ',')
				}
				out = strconv.AppendFloat(out, float64(x), 'g', -1, 32)
			}
			out = append(out, ']')
		}
		out = append(out, '}')
	}
	out = append(out, `],"model":`...)
	name, _ := json.Marshal(s.cfg.ServedModelName)
	out = append(out, name...)
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(tokens), 10)
	out = append(out, "}}\n"...)
	return out
}
