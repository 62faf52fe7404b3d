package backend_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	_ "github.com/llmserve/llmserve/backend/cpu"
	_ "github.com/llmserve/llmserve/backend/replay"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/sampling"
)

func TestParseDevice(t *testing.T) {
	for _, c := range []struct {
		in   string
		kind string
		idx  int
		bad  bool
	}{
		{"cpu", "cpu", 0, false}, {"cpu:0", "cpu", 0, false}, {"cuda", "cuda", 0, false}, {"cuda:3", "cuda", 3, false},
		{"cpu:1", "", 0, true}, {"cuda:-1", "", 0, true}, {"cuda:x", "", 0, true}, {"", "", 0, true}, {"CUDA:1", "", 0, true}, {":1", "", 0, true},
	} {
		kind, idx, err := backend.ParseDevice(c.in)
		if (err != nil) != c.bad || kind != c.kind || idx != c.idx {
			t.Errorf("ParseDevice(%q) = %q, %d, %v", c.in, kind, idx, err)
		}
	}
}

// A device kind nothing registered (cuda in a build without it) fails by name, listing what is.
func TestOpenUnregistered(t *testing.T) {
	_, err := backend.Open("cuda:1", &model.Model{}, backend.Options{NumBlocks: 1})
	if err == nil || !strings.Contains(err.Error(), `"cuda" is not built into this binary or not registered`) || !strings.Contains(err.Error(), "cpu, replay") {
		t.Fatalf("Open(cuda:1) = %v", err)
	}
	if _, err := backend.Lookup("cpu"); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a second registration of cpu did not panic")
		}
	}()
	backend.Register("cpu", func(*model.Model, backend.Options) (backend.Backend, error) { return nil, errors.New("no") })
}

func TestKVBlocks(t *testing.T) {
	avail := func() (int64, error) { return 1000, nil }
	for _, c := range []struct {
		o      backend.Options
		blocks int
		source string
		bad    bool
	}{
		{backend.Options{NumBlocks: 7, KVCacheBytes: 1 << 20}, 7, "blocks", false},
		{backend.Options{KVCacheBytes: 350, KVCacheFraction: 0.9}, 3, "bytes", false},
		{backend.Options{KVCacheFraction: 0.5}, 5, "fraction", false},
		{backend.Options{KVCacheFraction: 0.05}, 0, "fraction", true},
		{backend.Options{}, 0, "", true},
	} {
		p, err := c.o.KVBlocks(100, avail)
		if (err != nil) != c.bad || p.Blocks != c.blocks || p.Source != c.source {
			t.Errorf("%+v: %+v, %v", c.o, p, err)
		}
	}
	if _, err := (&backend.Options{KVCacheFraction: 0.5}).KVBlocks(100, nil); err == nil {
		t.Error("a fraction without a way to read the available memory was accepted")
	}
	bad := backend.Options{Device: -1, NumBlocks: -1, KVCacheBytes: -1, KVCacheFraction: 1.5, BlockSize: -2, KVCacheDType: 9}
	err := bad.Validate()
	for _, want := range []string{"device index", "KV blocks", "bytes", "fraction", "block size", "dtype"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate of %+v: %v, want it to name %s", bad, err, want)
		}
	}
	if nan := (backend.Options{KVCacheFraction: math.NaN()}); nan.Validate() == nil {
		t.Error("a NaN fraction passed Validate")
	}
}

// HostSample leaves the row as computed, honours Ban and Mask, and draws by seed and step only.
func TestHostSample(t *testing.T) {
	row := []float32{1, 5, 2, 4.9, 0}
	orig := append([]float32(nil), row...)
	var sc sampling.Scratch
	var p backend.Pick
	spec := backend.SampleSpec{Temperature: 0, TopP: 1, RepetitionPenalty: 1, Ban: []int32{1}, Logprob: true, TopLogprobs: 2}
	backend.HostSample(row, &spec, &sc, &p)
	if p.Token != 3 || len(p.TopIDs) != 2 || p.TopIDs[0] != 1 {
		t.Fatalf("greedy with token 1 banned: %+v", p)
	}
	if want := sampling.LogSoftmaxAt(orig, 3); p.Logprob != want {
		t.Fatalf("logprob %v, want the raw row's %v", p.Logprob, want)
	}
	for i := range row {
		if row[i] != orig[i] {
			t.Fatalf("HostSample changed the row: %v", row)
		}
	}
	spec = backend.SampleSpec{Temperature: 1, TopP: 1, RepetitionPenalty: 1, Mask: []uint64{1 << 4}}
	backend.HostSample(row, &spec, &sc, &p)
	if p.Token != 4 {
		t.Fatalf("mask allowing only token 4: picked %d", p.Token)
	}
	draws := func(seed uint64) []int32 {
		var out []int32
		for step := range 40 {
			s := backend.SampleSpec{Temperature: 3, TopP: 1, RepetitionPenalty: 1, Seed: seed, Step: uint32(step)}
			backend.HostSample(row, &s, &sc, &p)
			out = append(out, p.Token)
		}
		return out
	}
	a, b := draws(7), draws(7)
	if !slices.Equal(a, b) {
		t.Fatalf("seed 7 drew %v then %v", a, b)
	}
	if slices.Equal(a, draws(8)) {
		t.Fatal("seeds 7 and 8 drew the same 40 tokens")
	}
}
