package model

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type fixedEOS struct {
	id int32
	ok bool
}

func (f fixedEOS) EOS() (int32, bool) { return f.id, f.ok }

func TestEOSTokenIDsIn(t *testing.T) {
	dir := t.TempDir()
	if got := EOSTokenIDsIn(dir); len(got) != 0 {
		t.Fatalf("empty dir: %v, want none", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id":[7,9]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := EOSTokenIDsIn(dir); !slices.Equal(got, []int32{7, 9}) {
		t.Fatalf("generation_config only: %v, want [7 9]", got)
	}
	if got := EOSTokenIDsIn("../testdata/models/llama"); !slices.Equal(got, []int32{2}) {
		t.Fatalf("llama fixture: %v, want [2]", got)
	}
}

func TestConstraintEOS(t *testing.T) {
	model := []int32{0, 2}
	for _, c := range []struct {
		tok  fixedEOS
		want []int32
	}{
		{fixedEOS{5, true}, []int32{0, 2, 5}},
		{fixedEOS{2, true}, []int32{0, 2}},
		{fixedEOS{5, false}, []int32{0, 2}},
	} {
		if got := ConstraintEOS(model, c.tok); !slices.Equal(got, c.want) {
			t.Errorf("tokenizer eos %+v: %v, want %v", c.tok, got, c.want)
		}
	}
	if !slices.Equal(model, []int32{0, 2}) {
		t.Fatalf("model ids changed: %v", model)
	}
}
