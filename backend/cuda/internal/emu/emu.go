// Package emu is an emulated CUDA device for tests without a GPU: device memory is a
// bounds-checked Go arena addressed by integer device pointers, and launching a kernel decodes
// the same packed argument buffer the driver would receive and runs that kernel's Go reference
// over the whole grid. Every out-of-bounds access fails the launch, naming the kernel, the
// address and the allocation it strayed from; fresh allocations are filled with 0xFF bytes (NaN
// as float32 and bfloat16) so that reading memory nothing wrote shows up in the results.
package emu

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// base is the first device address handed out; gap separates allocations so an overrun never
// lands in a neighbour.
const (
	base  = 1 << 32
	gap   = 1 << 20
	align = 256
)

// Device is the emulated device. Its methods may be called from any goroutine.
type Device struct {
	// mu guards everything below.
	mu sync.Mutex
	// allocs are the live allocations, sorted by address.
	allocs []*alloc
	next   dev.Ptr
	// limit is the memory size reported by MemInfo, used the total of live allocations.
	limit, used int64
	// capture is non-nil while a graph is being recorded.
	capture *graph
	// Launches counts kernel launches (graph replays included), by kernel; Matmuls counts
	// library GEMMs likewise.
	Launches [dev.NumKernels]int
	Matmuls  int
	// noMatmul is set by NoMatmul: the device then has no library GEMM.
	noMatmul bool
}

type alloc struct {
	addr dev.Ptr
	mem  []byte
}

// launch is one recorded unit of work: kernel k, or the library GEMM matmul when it is set.
type launch struct {
	k           dev.Kernel
	grid, block dev.Dim3
	args        []byte
	matmul      *dev.MatmulArgs
}

type graph struct {
	dev.GraphHandle
	launches []launch
}

var _ dev.Device = (*Device)(nil)

// New returns an emulated device reporting limit bytes of memory.
func New(limit int64) *Device { return &Device{limit: limit, next: base} }

// Name describes the device.
func (d *Device) Name() string { return "emulated device" }

// MemInfo reports the limit minus live allocations.
func (d *Device) MemInfo() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limit - d.used, d.limit, nil
}

// Alloc allocates n bytes filled with 0xFF.
func (d *Device) Alloc(n int64) (dev.Ptr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("emu: allocation of %d bytes", n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.used+n > d.limit {
		return 0, fmt.Errorf("emu: out of memory: %d bytes wanted, %d of %d free", n, d.limit-d.used, d.limit)
	}
	words := make([]uint64, (n+7)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
	for i := range mem {
		mem[i] = 0xFF
	}
	a := &alloc{addr: d.next, mem: mem}
	d.next += dev.Ptr((n+align-1)/align*align + gap)
	d.allocs = append(d.allocs, a)
	d.used += n
	return a.addr, nil
}

// Free releases an allocation; p must be its start.
func (d *Device) Free(p dev.Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := slices.BinarySearchFunc(d.allocs, p, func(a *alloc, p dev.Ptr) int { return cmpPtr(a.addr, p) })
	if !ok {
		return fmt.Errorf("emu: free of %#x, which is not an allocation", p)
	}
	d.used -= int64(len(d.allocs[i].mem))
	d.allocs = slices.Delete(d.allocs, i, i+1)
	return nil
}

func cmpPtr(a, b dev.Ptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// bytes resolves [p, p+n) to its memory, or fails naming the allocation it leaves.
func (d *Device) bytes(p dev.Ptr, n int) ([]byte, error) {
	if n < 0 {
		return nil, fmt.Errorf("negative length %d at %#x", n, p)
	}
	i, _ := slices.BinarySearchFunc(d.allocs, p, func(a *alloc, p dev.Ptr) int { return cmpPtr(a.addr, p) })
	if i < len(d.allocs) && d.allocs[i].addr == p {
		i++
	}
	if i == 0 {
		return nil, fmt.Errorf("address %#x is below every allocation", p)
	}
	a := d.allocs[i-1]
	off := p - a.addr
	if off+dev.Ptr(n) > dev.Ptr(len(a.mem)) {
		return nil, fmt.Errorf("[%#x, +%d) leaves the allocation [%#x, +%d) at offset %d", p, n, a.addr, len(a.mem), off)
	}
	return a.mem[off : off+dev.Ptr(n) : off+dev.Ptr(n)], nil
}

// Upload copies src to dst.
func (d *Device) Upload(dst dev.Ptr, src []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.bytes(dst, len(src))
	if err != nil {
		return fmt.Errorf("emu: upload: %w", err)
	}
	copy(b, src)
	return nil
}

// Download copies from src to dst.
func (d *Device) Download(dst []byte, src dev.Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.bytes(src, len(dst))
	if err != nil {
		return fmt.Errorf("emu: download: %w", err)
	}
	copy(dst, b)
	return nil
}

// Memset sets n bytes at p to v.
func (d *Device) Memset(p dev.Ptr, v byte, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := d.bytes(p, int(n))
	if err != nil {
		return fmt.Errorf("emu: memset: %w", err)
	}
	for i := range b {
		b[i] = v
	}
	return nil
}

// Copy copies n bytes between device buffers.
func (d *Device) Copy(dst, src dev.Ptr, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	from, err := d.bytes(src, int(n))
	if err != nil {
		return fmt.Errorf("emu: copy: %w", err)
	}
	to, err := d.bytes(dst, int(n))
	if err != nil {
		return fmt.Errorf("emu: copy: %w", err)
	}
	copy(to, from)
	return nil
}

// Launch runs kernel k's reference now, or records it while capturing.
func (d *Device) Launch(k dev.Kernel, grid, block dev.Dim3, shmem int, args []byte) error {
	if k < 0 || k >= dev.NumKernels {
		return fmt.Errorf("emu: launch of unknown kernel %d", int(k))
	}
	if grid[0]*grid[1]*grid[2] == 0 || block[0]*block[1]*block[2] == 0 || block[0]*block[1]*block[2] > 1024 {
		return fmt.Errorf("emu: %s: invalid launch shape grid %v block %v", k, grid, block)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	l := launch{k: k, grid: grid, block: block, args: slices.Clone(args)}
	if d.capture != nil {
		d.capture.launches = append(d.capture.launches, l)
		return nil
	}
	return d.run(l)
}

// run executes one launch; d.mu is held.
func (d *Device) run(l launch) (err error) {
	name := l.k.String()
	if l.matmul != nil {
		name = "matmul"
	}
	m := &mem{d: d}
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(fault); ok {
				err = fmt.Errorf("emu: %s: illegal address: %w", name, f.err)
				return
			}
			panic(r)
		}
	}()
	if l.matmul != nil {
		d.Matmuls++
		if err := matmul(m, *l.matmul); err != nil {
			return fmt.Errorf("emu: matmul: %w", err)
		}
		return nil
	}
	d.Launches[l.k]++
	if err := refs[l.k](m, l.grid, l.args); err != nil {
		return fmt.Errorf("emu: %s: %w", l.k, err)
	}
	return nil
}

// Sync does nothing: launches run when issued.
func (d *Device) Sync() error { return nil }

// BeginCapture starts recording launches.
func (d *Device) BeginCapture() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.capture != nil {
		return errors.New("emu: capture already in progress")
	}
	d.capture = &graph{}
	return nil
}

// EndCapture returns the recorded launches as a graph.
func (d *Device) EndCapture() (dev.Graph, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.capture == nil {
		return nil, errors.New("emu: no capture in progress")
	}
	g := d.capture
	d.capture = nil
	return g, nil
}

// LaunchGraph replays a graph's launches with their recorded arguments.
func (d *Device) LaunchGraph(g dev.Graph) error {
	gr, ok := g.(*graph)
	if !ok {
		return fmt.Errorf("emu: foreign graph %T", g)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range gr.launches {
		if err := d.run(l); err != nil {
			return fmt.Errorf("graph: %w", err)
		}
	}
	return nil
}

// Run calls fn: the emulator has no device thread to move to.
func (d *Device) Run(fn func() error) error { return fn() }

// Elapsed times fn by the wall clock.
func (d *Device) Elapsed(fn func() error) (float32, error) {
	t := time.Now()
	err := fn()
	return float32(time.Since(t).Seconds() * 1e3), err
}

// Close drops every allocation.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.allocs, d.used = nil, 0
	return nil
}
