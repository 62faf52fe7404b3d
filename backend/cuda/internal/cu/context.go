package cu

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Launch parameters of cuLaunchKernel's extra array (cuda.h).
const (
	launchParamEnd           = 0x00
	launchParamBufferPointer = 0x01
	launchParamBufferSize    = 0x02
)

// Flags and attributes used below (cuda.h).
const (
	memHostAllocPortable    = 0x01
	streamNonBlocking       = 0x01
	captureModeThreadLocal  = 1
	attrComputeCapMajor     = 75
	attrComputeCapMinor     = 76
	attrMultiprocessorCount = 16
)

// Context is one device's primary context with one stream. Every driver call runs on the
// Context's own goroutine, locked to its OS thread, where the context is current; methods may
// be called from any goroutine and are serialised.
type Context struct {
	// Ordinal is the device number.
	Ordinal int
	// Name is the device's name, Major and Minor its compute capability, SMs its multiprocessor
	// count.
	Name         string
	Major, Minor int
	SMs          int

	dev    int32
	ctx    uintptr
	stream uintptr
	// calls carries work to the locked goroutine; closed by Close.
	calls chan func()
	// tid is the OS thread the locked goroutine runs on: a Do from that thread (a call made
	// inside another Do's function) runs at once instead of through calls, so a whole step run
	// inside one Do launches its kernels without a goroutine hand-off each (~25 µs apiece on an
	// H200 host, more than most decode kernels take).
	tid int
	// launch is the pinned scratch of one launch: the extra array, the size word and the packed
	// arguments (the driver reads it during cuLaunchKernel only).
	launch []byte
	// launchPtr is launch's address.
	launchPtr uintptr
}

// maxArgBytes bounds a kernel's packed arguments (the driver's limit is 4 KiB up to CUDA 12.0).
const maxArgBytes = 4096

// Open loads the driver and makes device ordinal's primary context current on a new locked
// goroutine, with one non-blocking stream.
func Open(ordinal int) (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	c := &Context{Ordinal: ordinal, calls: make(chan func())}
	ready := make(chan error, 1)
	go c.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return c, nil
}

// loop is the device goroutine: it owns the thread the context is current on.
func (c *Context) loop(ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c.tid = gettid() // before ready: Open's return publishes it
	if err := c.init(); err != nil {
		ready <- fmt.Errorf("cuda: open device %d: %w", c.Ordinal, err)
		return
	}
	ready <- nil
	for fn := range c.calls {
		fn()
	}
}

func (c *Context) init() error {
	var n int32
	if err := call(fnDeviceGetCount, uintptr(unsafe.Pointer(&n))); err != nil {
		return err
	}
	if c.Ordinal < 0 || c.Ordinal >= int(n) {
		return fmt.Errorf("device %d does not exist (%d devices)", c.Ordinal, n)
	}
	if err := call(fnDeviceGet, uintptr(unsafe.Pointer(&c.dev)), uintptr(c.Ordinal)); err != nil {
		return err
	}
	name := make([]byte, 256)
	if err := call(fnDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(c.dev)); err != nil {
		return err
	}
	for i, b := range name {
		if b == 0 {
			c.Name = string(name[:i])
			break
		}
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrComputeCapMajor, &c.Major}, {attrComputeCapMinor, &c.Minor}, {attrMultiprocessorCount, &c.SMs}} {
		var v int32
		if err := call(fnDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(c.dev)); err != nil {
			return err
		}
		*a.dst = int(v)
	}
	if err := call(fnPrimaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(c.dev)); err != nil {
		return err
	}
	if err := call(fnCtxSetCurrent, c.ctx); err != nil {
		return err
	}
	if err := call(fnStreamCreate, uintptr(unsafe.Pointer(&c.stream)), streamNonBlocking); err != nil {
		return err
	}
	p, err := c.hostAlloc(maxArgBytes + 64)
	if err != nil {
		return err
	}
	c.launchPtr = p
	c.launch = pinnedView(p, maxArgBytes+64)
	return nil
}

// Stream is the context's stream handle (a CUstream, which libraries such as cuBLASLt take as
// their cudaStream_t). Work on it must be issued from Do.
func (c *Context) Stream() uintptr { return c.stream }

// Do runs fn on the device goroutine and returns its error; called from inside fn, it runs at
// once. fn must not wait for another goroutine's device call, which would wait for fn.
func (c *Context) Do(fn func() error) error {
	if c.calls == nil {
		return errors.New("cuda: context is closed")
	}
	if c.tid > 0 && gettid() == c.tid {
		// only the locked goroutine runs on its thread: this is a call from inside a Do
		return fn()
	}
	done := make(chan error, 1)
	c.calls <- func() { done <- fn() }
	return <-done
}

// Close destroys the stream and releases the primary context; the Context is unusable after.
func (c *Context) Close() error {
	if c.calls == nil {
		return nil
	}
	err := c.Do(func() error {
		var errs []error
		errs = append(errs, call(fnStreamDestroy, c.stream))
		errs = append(errs, call(fnMemFreeHost, c.launchPtr))
		errs = append(errs, call(fnPrimaryCtxRelease, uintptr(c.dev)))
		return errors.Join(errs...)
	})
	close(c.calls)
	c.calls = nil
	return err
}

// pinnedView views n bytes of pinned host memory at p. The memory is the driver's, not the Go
// heap's, so the slice holds no Go pointer the collector would follow.
func pinnedView(p uintptr, n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), p)), n)
}

func (c *Context) hostAlloc(n int) (uintptr, error) {
	var p uintptr
	if err := call(fnMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), memHostAllocPortable); err != nil {
		return 0, err
	}
	return p, nil
}

// Pinned is page-locked host memory: the only host memory asynchronous copies use.
type Pinned struct {
	// Bytes views the memory.
	Bytes []byte
	ptr   uintptr
}

// HostAlloc allocates n bytes of pinned host memory.
func (c *Context) HostAlloc(n int) (*Pinned, error) {
	var p uintptr
	err := c.Do(func() (err error) { p, err = c.hostAlloc(n); return err })
	if err != nil {
		return nil, err
	}
	return &Pinned{Bytes: pinnedView(p, n), ptr: p}, nil
}

// FreeHost releases pinned memory.
func (c *Context) FreeHost(p *Pinned) error {
	return c.Do(func() error { return call(fnMemFreeHost, p.ptr) })
}

// MemInfo returns the free and total device memory in bytes.
func (c *Context) MemInfo() (free, total int64, err error) {
	var f, t uint64
	err = c.Do(func() error { return call(fnMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))) })
	return int64(f), int64(t), err
}

// Alloc allocates n bytes of device memory (cuMemAlloc: never managed memory).
func (c *Context) Alloc(n int64) (uintptr, error) {
	var p uint64
	err := c.Do(func() error { return call(fnMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)) })
	return uintptr(p), err
}

// Free releases device memory.
func (c *Context) Free(p uintptr) error {
	return c.Do(func() error { return call(fnMemFree, p) })
}

// CopyHtoD copies src to dst synchronously (src may be Go memory: the call returns only once
// the copy is done).
func (c *Context) CopyHtoD(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return c.Do(func() error {
		if err := call(fnStreamSynchronize, c.stream); err != nil {
			return err
		}
		err := call(fnMemcpyHtoD, dst, uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)))
		runtime.KeepAlive(src)
		return err
	})
}

// CopyDtoH copies src to dst after the stream's work is done.
func (c *Context) CopyDtoH(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return c.Do(func() error {
		if err := call(fnStreamSynchronize, c.stream); err != nil {
			return err
		}
		err := call(fnMemcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), src, uintptr(len(dst)))
		runtime.KeepAlive(dst)
		return err
	})
}

// CopyHtoDAsync enqueues a copy from pinned memory on the stream.
func (c *Context) CopyHtoDAsync(dst uintptr, src *Pinned, off, n int) error {
	if off < 0 || n < 0 || off+n > len(src.Bytes) {
		return fmt.Errorf("cuda: async copy [%d,%d) outside pinned buffer of %d", off, off+n, len(src.Bytes))
	}
	return c.Do(func() error { return call(fnMemcpyHtoDAsync, dst, src.ptr+uintptr(off), uintptr(n), c.stream) })
}

// CopyDtoHAsync enqueues a copy to pinned memory on the stream.
func (c *Context) CopyDtoHAsync(dst *Pinned, off int, src uintptr, n int) error {
	if off < 0 || n < 0 || off+n > len(dst.Bytes) {
		return fmt.Errorf("cuda: async copy [%d,%d) outside pinned buffer of %d", off, off+n, len(dst.Bytes))
	}
	return c.Do(func() error { return call(fnMemcpyDtoHAsync, dst.ptr+uintptr(off), src, uintptr(n), c.stream) })
}

// CopyDtoD enqueues a device-to-device copy on the stream.
func (c *Context) CopyDtoD(dst, src uintptr, n int64) error {
	return c.Do(func() error { return call(fnMemcpyDtoD, dst, src, uintptr(n), c.stream) })
}

// Memset enqueues setting n bytes at p to v.
func (c *Context) Memset(p uintptr, v byte, n int64) error {
	return c.Do(func() error { return call(fnMemsetD8Async, p, uintptr(v), uintptr(n), c.stream) })
}

// Sync waits for the stream's work.
func (c *Context) Sync() error {
	return c.Do(func() error { return call(fnStreamSynchronize, c.stream) })
}

// Module is a loaded fatbin, cubin or PTX image.
type Module struct{ h uintptr }

// LoadModule loads an image (the driver JIT-compiles PTX for the device when no SASS fits).
func (c *Context) LoadModule(image []byte) (*Module, error) {
	m := &Module{}
	buf := append([]byte(nil), image...)
	buf = append(buf, 0) // PTX must be NUL-terminated; harmless for a fatbin
	err := c.Do(func() error {
		err := call(fnModuleLoadData, uintptr(unsafe.Pointer(&m.h)), uintptr(unsafe.Pointer(&buf[0])))
		runtime.KeepAlive(buf)
		return err
	})
	return m, err
}

// Unload releases a module.
func (c *Context) Unload(m *Module) error {
	return c.Do(func() error { return call(fnModuleUnload, m.h) })
}

// Function looks a kernel up by its (extern "C") name.
func (c *Context) Function(m *Module, name string) (uintptr, error) {
	var f uintptr
	cname := append([]byte(name), 0)
	err := c.Do(func() error {
		return call(fnModuleGetFunction, uintptr(unsafe.Pointer(&f)), m.h, uintptr(unsafe.Pointer(&cname[0])))
	})
	if err != nil {
		return 0, fmt.Errorf("kernel %s: %w", name, err)
	}
	return f, nil
}

// Launch enqueues kernel f with its arguments packed in one buffer, laid out as the kernel's
// parameters (CU_LAUNCH_PARAM_BUFFER_POINTER): the buffer is copied to pinned scratch first.
func (c *Context) Launch(f uintptr, grid, block [3]uint32, shmem uint32, args []byte) error {
	if len(args) > maxArgBytes {
		return fmt.Errorf("cuda: %d bytes of kernel arguments, limit %d", len(args), maxArgBytes)
	}
	return c.Do(func() error {
		// layout: [0,40) extra array, [40,48) size word, [64,...) arguments
		argp := c.launchPtr + 64
		copy(c.launch[64:], args)
		words := unsafe.Slice((*uint64)(unsafe.Add(unsafe.Pointer(nil), c.launchPtr)), 6)
		words[0] = launchParamBufferPointer
		words[1] = uint64(argp)
		words[2] = launchParamBufferSize
		words[3] = uint64(c.launchPtr + 40)
		words[4] = launchParamEnd
		words[5] = uint64(len(args))
		return call(fnLaunchKernel, f, uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
			uintptr(block[0]), uintptr(block[1]), uintptr(block[2]), uintptr(shmem), c.stream, 0, c.launchPtr)
	})
}

// Event is a CUDA event.
type Event struct{ h uintptr }

// NewEvent creates an event with timing.
func (c *Context) NewEvent() (*Event, error) {
	e := &Event{}
	err := c.Do(func() error { return call(fnEventCreate, uintptr(unsafe.Pointer(&e.h)), 0) })
	return e, err
}

// Record enqueues e on the stream.
func (c *Context) Record(e *Event) error {
	return c.Do(func() error { return call(fnEventRecord, e.h, c.stream) })
}

// Wait blocks until e has happened.
func (c *Context) Wait(e *Event) error {
	return c.Do(func() error { return call(fnEventSynchronize, e.h) })
}

// Elapsed returns the milliseconds between two recorded events.
func (c *Context) Elapsed(start, end *Event) (float32, error) {
	var ms float32
	err := c.Do(func() error {
		return call(fnEventElapsedTime, uintptr(unsafe.Pointer(&ms)), start.h, end.h)
	})
	return ms, err
}

// DestroyEvent releases e.
func (c *Context) DestroyEvent(e *Event) error {
	return c.Do(func() error { return call(fnEventDestroy, e.h) })
}

// Graph is an instantiated CUDA graph.
type Graph struct{ graph, exec uintptr }

// BeginCapture starts recording the stream's work into a graph.
func (c *Context) BeginCapture() error {
	return c.Do(func() error { return call(fnStreamBeginCapture, c.stream, captureModeThreadLocal) })
}

// EndCapture ends the recording and instantiates the graph.
func (c *Context) EndCapture() (*Graph, error) {
	g := &Graph{}
	err := c.Do(func() error {
		if err := call(fnStreamEndCapture, c.stream, uintptr(unsafe.Pointer(&g.graph))); err != nil {
			return err
		}
		return call(fnGraphInstantiate, uintptr(unsafe.Pointer(&g.exec)), g.graph, 0)
	})
	return g, err
}

// LaunchGraph enqueues g on the stream.
func (c *Context) LaunchGraph(g *Graph) error {
	return c.Do(func() error { return call(fnGraphLaunch, g.exec, c.stream) })
}

// DestroyGraph releases g.
func (c *Context) DestroyGraph(g *Graph) error {
	return c.Do(func() error {
		return errors.Join(call(fnGraphExecDestroy, g.exec), call(fnGraphDestroy, g.graph))
	})
}

// DriverVersion returns the driver's CUDA version (e.g. 13000).
func (c *Context) DriverVersion() (int, error) {
	var v int32
	err := c.Do(func() error { return call(fnDriverGetVersion, uintptr(unsafe.Pointer(&v))) })
	return int(v), err
}
