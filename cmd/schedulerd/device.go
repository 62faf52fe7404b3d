package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmserve/llmserve/backend"
	"github.com/llmserve/llmserve/metrics"
	"github.com/llmserve/llmserve/model"
	"github.com/urfave/cli/v3"
)

// openBackend loads the model at path (a Hugging Face directory or a GGUF file), quantized when
// quantization names a type, onto device (cpu, cuda:K) through the backend registry: a device
// kind this binary does not register fails before the model is read.
func openBackend(path, device, quantization string, opts backend.Options, log *slog.Logger) (backend.Backend, model.Config, error) {
	kind, _, err := backend.ParseDevice(device)
	if err != nil {
		return nil, model.Config{}, err
	}
	if _, err := backend.Lookup(kind); err != nil {
		return nil, model.Config{}, fmt.Errorf("--device %s: %w", device, err)
	}
	start := time.Now()
	log.Info("loading model", "path", path, "device", device)
	m, err := loadModel(path, quantization)
	if err != nil {
		return nil, model.Config{}, err
	}
	b, err := backend.Open(device, m, opts)
	if err != nil {
		return nil, model.Config{}, fmt.Errorf("model %s: %w", path, err)
	}
	attrs := []any{"path", path, "seconds", time.Since(start).Seconds(), "arch", m.Config.Architecture,
		"layers", m.Config.NumLayers, "kv_blocks", b.NumBlocks(), "block_size", b.BlockSize()}
	if p, ok := b.(interface{ KVPlan() backend.KVPlan }); ok {
		plan := p.KVPlan()
		attrs = append(attrs, "kv_sized_by", plan.Source, "kv_bytes", plan.Bytes)
		if plan.Source == "fraction" {
			attrs = append(attrs, "kv_fraction", opts.KVCacheFraction, "available_bytes", plan.Available)
		}
	}
	if d, ok := b.(interface{ LogAttrs() []any }); ok {
		attrs = append(attrs, d.LogAttrs()...)
	}
	attrs = append(attrs, "rss_mib", rssMiB())
	log.Info("model loaded", attrs...)
	return b, m.Config, nil
}

// kvOptions is the device-neutral KV settings of serve's and generate's flags.
func kvOptions(dtype string, mb int, fraction float64) (backend.Options, error) {
	kvType, err := backend.ParseKVDType(dtype)
	if err != nil {
		return backend.Options{}, fmt.Errorf("--kv-cache-dtype: %w", err)
	}
	if mb < 0 {
		return backend.Options{}, fmt.Errorf("--kv-cache-mb %d is negative", mb)
	}
	if !(fraction >= 0 && fraction <= 1) {
		return backend.Options{}, fmt.Errorf("--kv-cache-fraction %v is outside [0, 1]", fraction)
	}
	opts := backend.Options{KVCacheDType: kvType, KVCacheBytes: int64(mb) << 20, KVCacheFraction: fraction}
	if fraction > 0 {
		opts.KVCacheBytes = 0 // the fraction, when given, sizes the pool
	}
	return opts, nil
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
func kvCacheDTypeFlag(dst *string) cli.Flag {
	return &cli.StringFlag{Name: "kv-cache-dtype", Destination: dst, Value: "auto", Usage: "KV cache element type: auto (the weights' type), bf16, f16 or f32",
		Sources: cli.EnvVars("KV_CACHE_DTYPE")}
}
