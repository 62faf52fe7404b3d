package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/backend/cpu"
	"github.com/llmserve/llmserve/backend/cpu/gemm"
	"github.com/llmserve/llmserve/backend/cpu/linear"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/model"
	"github.com/urfave/cli/v3"
)

// openBackend loads the model at path (a Hugging Face directory or a GGUF file), quantized when
// quantization names a type, onto device ("cpu" now; "cuda:K" once that backend lands).
func openBackend(path, device, quantization string, opts cpu.Options, log *slog.Logger) (backend.Backend, model.Config, error) {
	switch {
	case device == "cpu":
	case strings.HasPrefix(device, "cuda"):
		return nil, model.Config{}, fmt.Errorf("device %q: the CUDA backend is not part of this build; use --device cpu", device)
	default:
		return nil, model.Config{}, fmt.Errorf("device %q: want cpu or cuda:K", device)
	}
	start := time.Now()
	log.Info("loading model", "path", path, "device", device)
	m, err := loadModel(path, quantization)
	if err != nil {
		return nil, model.Config{}, err
	}
	b, err := cpu.New(m, opts)
	if err != nil {
		return nil, model.Config{}, fmt.Errorf("cpu backend for %s: %w", path, err)
	}
	log.Info("model loaded", "path", path, "seconds", time.Since(start).Seconds(), "arch", m.Config.Architecture,
		"layers", m.Config.NumLayers, "kv_blocks", b.NumBlocks(), "block_size", b.BlockSize(), "kv_dtype", b.KVCacheDType(),
		"gemm", gemm.Impl(), "blas_core", gemm.Core(), "kernels", linear.Kernels(), "bf16_activations", opts.BF16Activations,
		"rss_mib", rssMiB())
	return b, m.Config, nil
}

// rssMiB is this process's resident memory in MiB (0 if unknown).
func rssMiB() int64 {
	p, err := metrics.ReadProc(os.Getpid())
	if err != nil {
		return 0
	}
	return int64(p.RSS) >> 20
}

// parseIDs reads "5,7,9".
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--input-ids: %q is not a token id", f)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--input-ids is empty")
	}
	return ids, nil
}

// kvCacheDTypeFlag is --kv-cache-dtype, shared by serve and generate.
// bf16ActivationsFlag is schedulerd's --bf16-activations.
func bf16ActivationsFlag(dst *bool) cli.Flag {
	return &cli.BoolFlag{Name: "bf16-activations", Destination: dst, Sources: cli.EnvVars("BF16_ACTIVATIONS"),
		Usage: "round the activations that BF16 weights multiply to bf16, as llama.cpp does: faster batched decode and prefill on CPUs with AVX512_BF16, but a request's tokens then depend on the requests batched with it"}
}

func kvCacheDTypeFlag(dst *string) cli.Flag {
	return &cli.StringFlag{Name: "kv-cache-dtype", Destination: dst, Value: "auto", Usage: "KV cache element type: auto (the weights' type), bf16, f16 or f32",
		Sources: cli.EnvVars("KV_CACHE_DTYPE")}
}
