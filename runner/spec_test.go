package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/grammar"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
	"github.com/llmserve/llmserve/scheduler"
	"github.com/llmserve/llmserve/tokenizer"
)

const longNamesSchema = `{"type":"object","properties":{
	"name_of_the_registered_team":{"type":"string","maxLength":12},
	"number_of_registered_players":{"type":"integer","minimum":0,"maximum":99}},
	"required":["name_of_the_registered_team","number_of_registered_players"],"additionalProperties":false}`

// TestJumpForwardDrafts: a JSON-schema constraint drafts the tokens of the bytes its grammar
// forces (the opening brace and property names), which decode to those bytes, and counts
// the leading tokens it admits without changing its state.
func TestJumpForwardDrafts(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGrammars(grammar.NewCompiler(tok, nil, grammar.Options{}))
	var wg sync.WaitGroup
	c := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindJSONSchema, Text: longNamesSchema})
	wg.Wait()
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	if got := c.ForcedTokens(nil, 8); len(got) != 0 {
		t.Fatalf("drafts without an encoder: %v", got)
	}
	c.encode = func(text string) []int32 { return tok.Encode(text, false) }
	forced := string(c.m.ForcedBytes())
	if !strings.HasPrefix(forced, `{`) {
		t.Fatalf("forced bytes at the start: %q", forced)
	}
	d := c.ForcedTokens([]int32{7}, 64)
	if d[0] != 7 || len(d) < 2 {
		t.Fatalf("ForcedTokens(dst=[7]) = %v", d)
	}
	if text := tok.Decode(d[1:], false); !strings.HasPrefix(forced, text) {
		t.Fatalf("drafts spell %q, not a prefix of the forced %q", text, forced)
	}
	if short := c.ForcedTokens(nil, 1); len(short) != 1 {
		t.Fatalf("max 1: %v", short)
	}
	// Nothing moved: the drafts are admitted again, and a token after them that the grammar
	// refuses ends the count.
	bad := tok.Encode("]", false)
	if n := c.Admits(append(slices.Clone(d[1:]), bad...)); n != len(d)-1 {
		t.Fatalf("Admits = %d, want %d", n, len(d)-1)
	}
	if again := c.ForcedTokens(nil, 64); !slices.Equal(again, d[1:]) {
		t.Fatalf("state changed: %v, then %v", d[1:], again)
	}
}

// TestJumpForwardOutputsIdentical serves schema-constrained requests (greedy and seeded) on
// pico through the scheduler with and without speculation, with the runner's grammar
// constraints, canonical literals on and off: outputs are identical, valid JSON, and the forced
// property names rode as accepted drafts. With canonical literals the model can only take the
// tokenizer's spelling of a forced name, so the drafts (that spelling) are accepted and the
// greedy request takes far fewer forward passes than tokens.
func TestJumpForwardOutputsIdentical(t *testing.T) {
	tok, err := tokenizer.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load("../models/pico")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGrammars(grammar.NewCompiler(tok, model.ConstraintEOS(m.Generation.EOSTokenIDs, tok), grammar.Options{}))
	// serve returns each request's ids, the scheduler's counts and the greedy request's passes
	// (the steps that gave it tokens).
	serve := func(mode string, canonical bool) (map[string][]int32, scheduler.Stats, int) {
		gs.SetCanonicalLiterals(canonical)
		b, err := cpu.New(m, backend.Options{NumBlocks: 256, BlockSize: 16, Tuning: cpu.Tuning{Threads: 2}})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		s, err := scheduler.New(b, scheduler.Config{MaxRunning: 8, MaxPrefillTokens: 1024, EOS: m.Generation.EOSTokenIDs,
			MaxModelLen: 1024, Speculative: mode})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		prompt := tok.Encode("Register the team as JSON:\n", false)
		for i := range 4 {
			p := sampling.DefaultParams()
			if i == 0 {
				p.Temperature = 0
			} else {
				seed := uint64(i)
				p.Seed, p.Temperature = &seed, 0.8
			}
			c := gs.start(context.Background(), &wg, grammar.Spec{Kind: grammar.KindJSONSchema, Text: longNamesSchema})
			c.encode = func(text string) []int32 { return tok.Encode(text, false) }
			if err := s.Add(&scheduler.Request{RID: fmt.Sprint(i), InputIDs: prompt, MaxNewTokens: 80, Sampling: p,
				Constraint: c, Ready: c.Ready}); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
		out := map[string][]int32{}
		passes := 0
		for steps := 0; s.HasWork(); steps++ {
			if steps > 1000 {
				t.Fatal("requests did not finish")
			}
			o, err := s.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range o.Items {
				out[it.RID] = append(out[it.RID], it.NewIDs...)
				if it.RID == "0" && len(it.NewIDs) > 0 {
					passes++
				}
				if it.Finished && it.FinishReason != scheduler.FinishStop {
					t.Fatalf("%s finished %v %s", it.RID, it.FinishReason, it.Err)
				}
			}
		}
		return out, s.Stats(), passes
	}
	perPass := map[bool]float64{}
	for _, canonical := range []bool{false, true} {
		want, _, _ := serve(scheduler.SpeculativeOff, canonical)
		got, st, passes := serve(scheduler.SpeculativeNgram, canonical)
		for rid, ids := range want {
			if !slices.Equal(got[rid], ids) {
				t.Errorf("canonical %v, request %s: with speculation %q, without %q", canonical, rid, tok.Decode(got[rid], false), tok.Decode(ids, false))
			}
			text := tok.Decode(ids, true)
			if !json.Valid([]byte(text)) || !strings.Contains(text, "number_of_registered_players") {
				t.Errorf("canonical %v, request %s: %q", canonical, rid, text)
			}
		}
		if st.AcceptedTokens == 0 {
			t.Errorf("canonical %v: no draft accepted: %+v", canonical, st)
		}
		perPass[canonical] = float64(len(got["0"])) / float64(passes)
		t.Logf("canonical %v: %+v; greedy request: %d tokens in %d passes", canonical, st, len(got["0"]), passes)
	}
	// Most of this output is the two forced names: their drafts are all accepted.
	if perPass[true] < 2 || perPass[true] < 1.5*perPass[false] {
		t.Errorf("greedy tokens per pass %.2f with canonical literals, %.2f without", perPass[true], perPass[false])
	}
}
