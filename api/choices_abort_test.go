package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmserve/llmserve/tokenizer"
)

// siblingEngine gives every stream an id of its own ("eng-" + the request's rid), as the worker
// does. The first candidate produces one token and waits; the sibling's Submit is held until
// the client has gone and the first candidate has been aborted.
type siblingEngine struct {
	mu        sync.Mutex
	rids      int
	aborted   []string
	firstRID  string
	sibling   string        // the sibling's stream id
	siblingIn chan struct{} // closed when the sibling's Submit starts
	firstGone chan struct{} // closed when the first candidate's stream is aborted
}

func (e *siblingEngine) Submit(_ context.Context, req *Request) (*Stream, error) {
	st := NewStream("eng-" + req.RID)
	e.mu.Lock()
	first := e.firstRID == ""
	if first {
		e.firstRID = st.RID
	} else {
		e.sibling = st.RID
	}
	e.mu.Unlock()
	if first {
		st.Push(&Delta{IDs: []int32{7}, PromptTokens: len(req.InputIDs), CompletionTokens: 1})
		return st, nil
	}
	close(e.siblingIn)
	select {
	case <-e.firstGone:
	case <-time.After(10 * time.Second):
	}
	return st, nil
}

func (e *siblingEngine) Abort(rid string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.aborted = append(e.aborted, rid)
	if rid == e.firstRID && !slices.Contains(e.aborted[:len(e.aborted)-1], rid) {
		close(e.firstGone)
	}
}

func (e *siblingEngine) abortedRIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.aborted)
}

func (e *siblingEngine) Tokenizer() *tokenizer.Tokenizer        { return nil }
func (e *siblingEngine) CheckGrammar(GrammarKind, string) error { return nil }
func (e *siblingEngine) Health() error                          { return nil }
func (e *siblingEngine) Load() LoadReport                       { return LoadReport{} }
func (e *siblingEngine) NewRID() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rids++
	return fmt.Sprintf("r%d", e.rids)
}

// A choice submitted while its client goes away is aborted at the engine by the id of its
// stream: the client's disconnect aborted what had been submitted before it, so this one is
// the submitter's to end.
func TestSiblingSubmittedAsClientLeavesIsAborted(t *testing.T) {
	e := &siblingEngine{siblingIn: make(chan struct{}), firstGone: make(chan struct{})}
	ts := serveEngine(t, e, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions",
		strings.NewReader(`{"prompt":[1,2,3],"n":2,"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-e.siblingIn:
	case <-time.After(10 * time.Second):
		t.Fatal("the sibling choice was never submitted")
	}
	cancel() // the client leaves while the sibling is being submitted
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		sibling := e.sibling
		e.mu.Unlock()
		if slices.Contains(e.abortedRIDs(), sibling) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.Fatalf("aborted %v: the sibling's stream %s was never aborted", e.aborted, e.sibling)
}
