package dev

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// Profile is a Device that times every launch and library GEMM on the device (events around
// each one, so work no longer overlaps: for finding where a step's time goes, never for
// serving). Graph replays are not broken down: profile with graphs off.
type Profile struct {
	Device
	// mu guards times.
	mu sync.Mutex
	// times sums each kernel's device time by name and grid.
	times map[string]*KernelTime
}

// KernelTime is one kernel's (name and grid) device time over the profiled launches.
type KernelTime struct {
	// Name is the kernel's name and grid.
	Name string
	// Calls counts its launches; Ms sums their device time.
	Calls int
	Ms    float64
}

// NewProfile wraps d.
func NewProfile(d Device) *Profile { return &Profile{Device: d, times: map[string]*KernelTime{}} }

func (p *Profile) add(name string, ms float32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.times[name]
	if t == nil {
		t = &KernelTime{Name: name}
		p.times[name] = t
	}
	t.Calls++
	t.Ms += float64(ms)
}

// Launch runs the launch between two events and records its time.
func (p *Profile) Launch(k Kernel, grid, block Dim3, shmem int, args []byte) error {
	ms, err := p.Device.Elapsed(func() error { return p.Device.Launch(k, grid, block, shmem, args) })
	if err != nil {
		return err
	}
	p.add(fmt.Sprintf("%s grid=%dx%dx%d", k, grid[0], grid[1], grid[2]), ms)
	return nil
}

// Matmul runs the library GEMM between two events and records its time.
func (p *Profile) Matmul(a MatmulArgs) error {
	if a.M == 0 {
		return p.Device.Matmul(a)
	}
	ms, err := p.Device.Elapsed(func() error { return p.Device.Matmul(a) })
	if err != nil {
		return err
	}
	p.add(fmt.Sprintf("matmul M=%d N=%d K=%d", a.M, a.N, a.K), ms)
	return nil
}

// Reset forgets what was recorded.
func (p *Profile) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.times = map[string]*KernelTime{}
}

// Times returns what was recorded, the longest total first.
func (p *Profile) Times() []KernelTime {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]KernelTime, 0, len(p.times))
	for _, t := range p.times {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b KernelTime) int { return cmp.Or(cmp.Compare(b.Ms, a.Ms), cmp.Compare(a.Name, b.Name)) })
	return out
}
