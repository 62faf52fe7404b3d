package cuda

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
	"github.com/llmserve/llmserve/backend/cuda/internal/emu"
)

// counts are the emulator's launch counters at one point.
type counts struct {
	Launches [dev.NumKernels]int
	Matmuls  int
}

// ltSteps runs a two-sequence prefill, then two decode steps with both sequences, and returns
// every logits row with the emulator's launch counts after each phase.
func ltSteps(t *testing.T, b *Backend) (rows [][]float32, prefill, decode counts) {
	t.Helper()
	e := b.d.(*emu.Device)
	ctx := context.Background()
	prompts := [][]int32{{1, 5, 9, 14, 3, 7, 2, 8, 11, 4, 6, 10, 12, 13, 15, 16, 17, 18, 19}, {2, 4, 6}}
	tables := [][]int32{{0, 1}, {2}}
	var batch backend.Batch
	for i, p := range prompts {
		batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: p, BlockTable: tables[i], Logits: true})
	}
	out, err := b.Forward(ctx, &batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range out {
		rows = append(rows, slices.Clone(r))
	}
	prefill.Launches, prefill.Matmuls = e.Launches, e.Matmuls
	for step := range 2 {
		batch.Seqs = batch.Seqs[:0]
		for i, p := range prompts {
			batch.Seqs = append(batch.Seqs, backend.Seq{Tokens: []int32{int32(20 + step)}, Pos: len(p) + step, BlockTable: tables[i], Logits: true})
		}
		out, err := b.Forward(ctx, &batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range out {
			rows = append(rows, slices.Clone(r))
		}
	}
	decode.Launches, decode.Matmuls = e.Launches, e.Matmuls
	return rows, prefill, decode
}

// With the library GEMM present, prompt rows run cast_bf16 + Matmul and never the tiled GEMM,
// decode rows the decode kernel only; the logits are those of the built-in path (on the
// emulator both are the same f32 arithmetic, so bit for bit).
func TestPromptGemmsRunOnTheLibrary(t *testing.T) {
	m := randomModel(t)
	opts := backend.Options{NumBlocks: 16}
	lt := emulated(t, m, opts, Tuning{NoGraphs: true})
	if lt.lt == nil || !strings.Contains(lt.gemmName(), "cuBLASLt") {
		t.Fatalf("library GEMM not selected: %q", lt.gemmName())
	}
	// one plan per distinct weight shape: qkv, o, gate|up, down and the LM head
	if len(lt.lt) != 5 {
		t.Fatalf("%d planned shapes, want 5: %v", len(lt.lt), lt.lt)
	}
	got, pre, dec := ltSteps(t, lt)
	layers := m.Config.NumLayers
	if pre.Matmuls != 4*layers+1 || pre.Launches[dev.KGemm] != 0 || pre.Launches[dev.KCastBF16] != pre.Matmuls {
		t.Fatalf("prefill: %d matmuls, %d casts, %d tiled GEMMs; want %d, as many, 0",
			pre.Matmuls, pre.Launches[dev.KCastBF16], pre.Launches[dev.KGemm], 4*layers+1)
	}
	if dec.Matmuls != pre.Matmuls || dec.Launches[dev.KGemv] == pre.Launches[dev.KGemv] {
		t.Fatalf("decode steps ran %d matmuls and %d decode GEMMs; want 0 and some",
			dec.Matmuls-pre.Matmuls, dec.Launches[dev.KGemv]-pre.Launches[dev.KGemv])
	}

	builtin := emulated(t, m, opts, Tuning{NoGraphs: true, NoCublasLt: true})
	want, pre, _ := ltSteps(t, builtin)
	if pre.Matmuls != 0 || pre.Launches[dev.KGemm] == 0 || builtin.lt != nil {
		t.Fatalf("NoCublasLt: %d matmuls, %d tiled GEMMs", pre.Matmuls, pre.Launches[dev.KGemm])
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("row %d differs between the library and the built-in GEMM", i)
		}
	}
}

// Without the library (a GPU without cuBLASLt), the backend says so once and runs every GEMM
// on the built-in kernels.
func TestNoLibraryFallsBack(t *testing.T) {
	m := randomModel(t)
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	d := emu.New(8 << 30)
	d.NoMatmul()
	b, err := newBackend(d, m, backend.Options{NumBlocks: 16}, Tuning{Emulate: true, NoGraphs: true})
	slog.SetDefault(prev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if n := strings.Count(logs.String(), "cuBLASLt is unavailable"); n != 1 {
		t.Fatalf("%d warnings about the missing library, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "switched off") || b.gemmName() != "built-in tiled kernel" {
		t.Fatalf("warning does not carry the device's reason, or GEMM named %q:\n%s", b.gemmName(), logs.String())
	}
	_, pre, _ := ltSteps(t, b)
	if pre.Matmuls != 0 || pre.Launches[dev.KGemm] == 0 {
		t.Fatalf("%d matmuls, %d tiled GEMMs", pre.Matmuls, pre.Launches[dev.KGemm])
	}
}

// Tuning.LtDecodeRows sends a step's decode rows through the library once there are that
// many, in graphs too.
func TestLtDecodeRows(t *testing.T) {
	m := randomModel(t)
	for _, graphs := range []bool{false, true} {
		b := emulated(t, m, backend.Options{NumBlocks: 16}, Tuning{NoGraphs: !graphs, LtDecodeRows: 2})
		_, pre, dec := ltSteps(t, b)
		if dec.Launches[dev.KGemv] != pre.Launches[dev.KGemv] || dec.Matmuls == pre.Matmuls {
			t.Fatalf("graphs %v: decode steps of 2 rows ran %d decode GEMMs and %d matmuls; want 0 and some",
				graphs, dec.Launches[dev.KGemv]-pre.Launches[dev.KGemv], dec.Matmuls-pre.Matmuls)
		}
	}
}
