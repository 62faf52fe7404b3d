package backend

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/llmserve/llmserve/model"
)

// Options are the device-neutral settings of a backend. Settings only one backend understands
// (CPU threads, the replay runner's step time) travel in Tuning, as that backend's own type.
type Options struct {
	// Device is the index of the device among its kind (K of cuda:K); 0 for the CPU.
	Device int
	// NumBlocks is the size of the KV pool in blocks. When 0, KVCacheBytes sizes it, and when
	// that is 0 too, KVCacheFraction.
	NumBlocks int
	// KVCacheBytes is the memory for the keys and values of all layers.
	KVCacheBytes int64
	// KVCacheFraction is the share of the device memory still available once the weights are
	// loaded that the KV pool takes, in (0, 1] (as vLLM's --gpu-memory-utilization, but of what
	// is left): on the CPU, of the machine's available RAM.
	KVCacheFraction float64
	// KVCacheDType is the KV cache's element type (KVAuto: follow the weights).
	KVCacheDType KVDType
	// BlockSize is the number of positions per KV block (the backend's default when 0).
	BlockSize int
	// Tuning holds one backend's own settings (for example *cpu.Tuning); nil means its
	// defaults. A backend refuses a Tuning of another backend's type.
	Tuning any
}

// Validate reports options that are out of range.
func (o *Options) Validate() error {
	var errs []error
	if o.Device < 0 {
		errs = append(errs, fmt.Errorf("device index %d is negative", o.Device))
	}
	if o.NumBlocks < 0 || o.NumBlocks > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("KV blocks %d out of range [0, %d]", o.NumBlocks, math.MaxInt32))
	}
	if o.KVCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("KV cache bytes %d is negative", o.KVCacheBytes))
	}
	if !(o.KVCacheFraction >= 0 && o.KVCacheFraction <= 1) {
		errs = append(errs, fmt.Errorf("KV cache fraction %v is outside [0, 1]", o.KVCacheFraction))
	}
	if o.BlockSize < 0 {
		errs = append(errs, fmt.Errorf("block size %d is negative", o.BlockSize))
	}
	if o.KVCacheDType < KVAuto || o.KVCacheDType > KVF16 {
		errs = append(errs, fmt.Errorf("unknown KV cache dtype %d", int(o.KVCacheDType)))
	}
	return errors.Join(errs...)
}

// KVPlan is how a KV pool was sized, for the start-up log.
type KVPlan struct {
	// Blocks is the pool size; Bytes what it occupies.
	Blocks int
	Bytes  int64
	// Source says which option sized it: "blocks", "bytes" or "fraction".
	Source string
	// Available is the memory the fraction applied to (0 unless Source is "fraction").
	Available int64
}

// KVBlocks sizes the KV pool of blocks of bytesPerBlock: NumBlocks when set, else as many as
// KVCacheBytes holds, else KVCacheFraction of available (the device's free memory once the
// weights are loaded, from the backend). It fails when the result holds no block.
func (o *Options) KVBlocks(bytesPerBlock int64, available func() (int64, error)) (KVPlan, error) {
	if bytesPerBlock <= 0 {
		return KVPlan{}, fmt.Errorf("KV block of %d bytes", bytesPerBlock)
	}
	var p KVPlan
	switch {
	case o.NumBlocks > 0:
		p = KVPlan{Blocks: o.NumBlocks, Source: "blocks"}
	case o.KVCacheBytes > 0:
		p = KVPlan{Blocks: int(min(o.KVCacheBytes/bytesPerBlock, math.MaxInt32)), Source: "bytes"}
	case o.KVCacheFraction > 0:
		if available == nil {
			return KVPlan{}, errors.New("KV cache fraction set, but the backend cannot tell the memory available")
		}
		avail, err := available()
		if err != nil {
			return KVPlan{}, fmt.Errorf("KV cache fraction: available memory: %w", err)
		}
		p = KVPlan{Blocks: int(min(int64(float64(avail)*o.KVCacheFraction)/bytesPerBlock, math.MaxInt32)), Source: "fraction", Available: avail}
	default:
		return KVPlan{}, errors.New("no KV cache size: set the blocks, the bytes or the fraction of available memory")
	}
	p.Bytes = int64(p.Blocks) * bytesPerBlock
	if p.Blocks <= 0 {
		return p, fmt.Errorf("KV cache sized by %s holds no block of %d bytes", p.Source, bytesPerBlock)
	}
	return p, nil
}

// KVDType is the element type a KV cache stores keys and values in.
type KVDType int

// The KV cache types. A 16-bit cache halves the bytes attention reads per position; keys and
// values are rounded to nearest even when stored and widened exactly when read.
const (
	// KVAuto follows the weights: BF16 weights give a BF16 cache, F16 (and quantized, as
	// llama.cpp does) an F16 cache, F32 an F32 cache.
	KVAuto KVDType = iota
	KVF32
	KVBF16
	KVF16
)

// ParseKVDType reads a --kv-cache-dtype value: auto, bf16, f16 or f32 (case-insensitive).
func ParseKVDType(s string) (KVDType, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return KVAuto, nil
	case "f32", "float32":
		return KVF32, nil
	case "bf16", "bfloat16":
		return KVBF16, nil
	case "f16", "float16":
		return KVF16, nil
	}
	return 0, fmt.Errorf("kv cache dtype %q: want auto, bf16, f16 or f32", s)
}

// String is the flag spelling.
func (d KVDType) String() string {
	switch d {
	case KVAuto:
		return "auto"
	case KVF32:
		return "f32"
	case KVBF16:
		return "bf16"
	case KVF16:
		return "f16"
	}
	return fmt.Sprintf("KVDType(%d)", int(d))
}

// ElemBytes is the size of one cached element (0 for KVAuto, which is no storage type).
func (d KVDType) ElemBytes() int {
	switch d {
	case KVF32:
		return 4
	case KVBF16, KVF16:
		return 2
	}
	return 0
}

// Factory opens a backend for m. A backend that computes nothing (the replay runner) reads only
// m.Config, and m may then hold no weights.
type Factory func(m *model.Model, opts Options) (Backend, error)

// registry holds the factories by name; mu guards it (registration runs in init functions,
// lookups at start-up).
var registry struct {
	mu        sync.Mutex
	factories map[string]Factory
}

// Register makes a backend available under name (cpu, cuda, replay); each backend package
// calls it from init. It panics on an empty name, a nil factory or a name taken twice.
func Register(name string, f Factory) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if name == "" || f == nil {
		panic("backend.Register: empty name or nil factory")
	}
	if _, dup := registry.factories[name]; dup {
		panic("backend.Register: " + name + " registered twice")
	}
	if registry.factories == nil {
		registry.factories = make(map[string]Factory)
	}
	registry.factories[name] = f
}

// Registered lists the registered names, sorted.
func Registered() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	names := make([]string, 0, len(registry.factories))
	for n := range registry.factories {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the factory registered as name, or an error naming those that are.
func Lookup(name string) (Factory, error) {
	registry.mu.Lock()
	f, ok := registry.factories[name]
	registry.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("backend %q is not built into this binary or not registered (have: %s)", name, strings.Join(Registered(), ", "))
	}
	return f, nil
}

// ParseDevice reads a --device value: "cpu", or a kind and an index ("cuda:1"; "cuda" alone is
// index 0). It checks only the spelling; Lookup tells whether the kind is built in.
func ParseDevice(s string) (kind string, index int, err error) {
	kind, idx, hasIdx := strings.Cut(strings.TrimSpace(s), ":")
	if kind == "" || strings.ContainsFunc(kind, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
		return "", 0, fmt.Errorf("device %q: want cpu or cuda:K", s)
	}
	if !hasIdx {
		return kind, 0, nil
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return "", 0, fmt.Errorf("device %q: index %q is not a number >= 0", s, idx)
	}
	if kind == "cpu" && n != 0 {
		return "", 0, fmt.Errorf("device %q: the CPU is one device, cpu or cpu:0", s)
	}
	return kind, n, nil
}

// Open parses device, looks its kind up and opens a backend for m on it, with opts.Device set
// to the device's index.
func Open(device string, m *model.Model, opts Options) (Backend, error) {
	kind, idx, err := ParseDevice(device)
	if err != nil {
		return nil, err
	}
	f, err := Lookup(kind)
	if err != nil {
		return nil, err
	}
	opts.Device = idx
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("%s backend: %w", device, err)
	}
	b, err := f(m, opts)
	if err != nil {
		return nil, fmt.Errorf("%s backend: %w", device, err)
	}
	return b, nil
}
