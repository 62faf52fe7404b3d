package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmserve/llmserve/cmd/internal/runflags"
	"github.com/llmserve/llmserve/gguf"
	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/quant"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/urfave/cli/v3"
)

// quantizeCommand writes a model (a Hugging Face directory or a GGUF file) as a GGUF file whose
// matrices are stored in one type, as llama.cpp's llama-quantize does: the result loads in
// llama.cpp and in this engine (serve OUT.gguf) without quantizing at every start.
func quantizeCommand() *cli.Command {
	var typ string
	return &cli.Command{
		Name:      "quantize",
		Usage:     "write a model as a GGUF file quantized to --type (loads in llama.cpp and in serve)",
		ArgsUsage: "IN OUT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Aliases: []string{"t"}, Destination: &typ, Value: "q8_0", Usage: "q8_0, q4_k, q4_0 or q6_k (or f32, f16, bf16)", Sources: cli.EnvVars("QUANTIZATION")},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 2 {
				return runflags.Configf("want IN OUT (a model directory or GGUF file, and the GGUF file to write), got %d arguments", cmd.Args().Len())
			}
			return quantizeFile(cmd.Args().Get(0), cmd.Args().Get(1), typ, os.Stderr)
		},
	}
}

// quantizeFile quantizes the model at in to t and writes it to out, reporting progress on
// progress.
func quantizeFile(in, out, typ string, progress io.Writer) error {
	t, err := quant.ParseType(typ)
	if err != nil {
		return runflags.Configf("--type: %w", err)
	}
	if abs1, _ := filepath.Abs(in); abs1 != "" {
		if abs2, _ := filepath.Abs(out); abs1 == abs2 {
			return runflags.Configf("OUT %s is IN: write to another file", out)
		}
	}
	log := slog.New(slog.NewTextHandler(progress, nil)).With("proc", "quantize")
	slog.SetDefault(log) // model.Quantize reports each layer
	start := time.Now()
	m, err := model.Open(in)
	if err != nil {
		return runflags.AsConfig(err)
	}
	log.Info("loaded", "model", in, "layers", m.Config.NumLayers, "elapsed_seconds", time.Since(start).Seconds())
	if err := model.Quantize(m, t); err != nil {
		return fmt.Errorf("quantize %s to %s: %w", in, t, err)
	}
	w, err := m.GGUFWriter()
	if err != nil {
		return fmt.Errorf("%s as GGUF: %w", in, err)
	}
	if err := setTokenizerMetadata(w, in, m.Config.VocabSize); err != nil {
		return fmt.Errorf("%s: tokenizer metadata: %w", in, err)
	}
	tmp := out + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return runflags.AsConfig(err)
	}
	defer os.Remove(tmp) // gone once renamed; left behind by nothing
	pw := &progressWriter{w: fh, log: log, start: time.Now(), every: 64 << 20}
	if _, err := w.WriteTo(pw); err != nil {
		fh.Close()
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	log.Info("wrote", "file", out, "type", t, "mib", pw.n>>20, "elapsed_seconds", time.Since(start).Seconds())
	return nil
}

// setTokenizerMetadata sets w's tokenizer keys: from the Hugging Face tokenizer of a model
// directory, or copied from the source GGUF file.
func setTokenizerMetadata(w *gguf.Writer, in string, vocabSize int) error {
	if !gguf.IsGGUF(in) {
		return tokenizer.SetGGUFMetadata(w, in, vocabSize)
	}
	f, err := gguf.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			if err := w.Set(kv.Key, kv.Value); err != nil {
				return fmt.Errorf("copy %s: %w", kv.Key, err)
			}
		}
	}
	return nil
}

// progressWriter logs how much has been written every so many bytes.
type progressWriter struct {
	w         io.Writer
	log       *slog.Logger
	start     time.Time
	every, n  int64
	nextLogAt int64
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	if p.n >= p.nextLogAt {
		p.log.Info("writing", "mib", p.n>>20, "elapsed_seconds", time.Since(p.start).Seconds())
		p.nextLogAt = p.n + p.every
	}
	return n, err
}
