package cuda

import (
	"errors"
	"fmt"
	"os"

	"github.com/llmserve/llmserve/backend/cuda/internal/cu"
	"github.com/llmserve/llmserve/backend/cuda/internal/cublaslt"
	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// stagingBytes is the pinned buffer uploads and downloads go through.
const stagingBytes = 64 << 20

// SyncEnv, set to 1, waits for every launch and reports its error there (localises a fault).
const SyncEnv = "LLMSERVE_CUDA_SYNC"

// driverDevice is dev.Device on a real GPU through the driver API.
type driverDevice struct {
	c   *cu.Context
	mod *cu.Module
	// fns are the kernels' function handles, by dev.Kernel.
	fns [dev.NumKernels]uintptr
	// staging is pinned host memory every copy goes through.
	staging *cu.Pinned
	sync    bool
	// lt is the cuBLASLt handle, nil when the library did not load or start (ltErr says why);
	// ltWork is its workspace (cublaslt.WorkspaceBytes) and plans its plans by weight shape,
	// made on first use and kept: every call of a shape runs the algorithm chosen then.
	lt     *cublaslt.Handle
	ltName string
	ltErr  error
	ltWork dev.Ptr
	plans  map[cublaslt.Shape]*cublaslt.Plan
}

type driverGraph struct {
	dev.GraphHandle
	g *cu.Graph
}

// openDriver opens GPU ordinal and loads the kernels. Without a driver the error is the
// loader's; on a GPU without a built fatbin, it wraps dev.ErrNoFatbin.
func openDriver(ordinal int) (*driverDevice, error) {
	c, err := cu.Open(ordinal)
	if err != nil {
		return nil, err
	}
	d := &driverDevice{c: c, sync: os.Getenv(SyncEnv) == "1"}
	if err := d.init(); err != nil {
		_ = d.Close()
		return nil, err
	}
	return d, nil
}

func (d *driverDevice) init() error {
	image, err := fatbin()
	if err != nil {
		return err
	}
	if d.mod, err = d.c.LoadModule(image); err != nil {
		return fmt.Errorf("load kernels: %w", err)
	}
	for k, info := range dev.Kernels {
		if d.fns[k], err = d.c.Function(d.mod, info.Name); err != nil {
			return err
		}
	}
	if d.staging, err = d.c.HostAlloc(stagingBytes); err != nil {
		return fmt.Errorf("pinned staging buffer: %w", err)
	}
	d.ltErr = d.initLt()
	return nil
}

// initLt loads cuBLASLt, creates its handle and workspace; its error only means that GEMMs
// run on the built-in kernels.
func (d *driverDevice) initLt() error {
	lib, err := cublaslt.Load()
	if err != nil {
		return err
	}
	if err := d.c.Do(func() (err error) { d.lt, err = lib.NewHandle(); return err }); err != nil {
		d.lt = nil
		return fmt.Errorf("cuBLASLt %d at %s: %w", lib.Version, lib.Path, err)
	}
	if d.ltWork, err = d.Alloc(cublaslt.WorkspaceBytes); err != nil {
		_ = d.c.Do(d.lt.Destroy)
		d.lt = nil
		return fmt.Errorf("cuBLASLt workspace: %w", err)
	}
	d.ltName = fmt.Sprintf("cuBLASLt %d (%s)", lib.Version, lib.Path)
	d.plans = map[cublaslt.Shape]*cublaslt.Plan{}
	return nil
}

func (d *driverDevice) MatmulLib() (string, error) {
	if d.lt == nil {
		return "", d.ltErr
	}
	return d.ltName, nil
}

// Matmul runs a on the plan of its shape (made now if it is the shape's first call; M == 0
// only makes it). Plans are made and called on the device goroutine.
func (d *driverDevice) Matmul(a dev.MatmulArgs) error {
	if d.lt == nil {
		return fmt.Errorf("matmul: %w", d.ltErr)
	}
	s := cublaslt.Shape{N: a.N, K: a.K, Ldx: a.Ldx, Ldo: a.Ldo}
	err := d.c.Do(func() error {
		p, ok := d.plans[s]
		if !ok {
			var err error
			if p, err = d.lt.NewPlan(s); err != nil {
				return err
			}
			d.plans[s] = p
		}
		if a.M == 0 {
			return nil
		}
		if err := p.Matmul(d.c.Stream(), uintptr(a.Out), uintptr(a.X), uintptr(a.W), uintptr(d.ltWork), a.M, a.Accumulate); err != nil {
			return fmt.Errorf("matmul M=%d N=%d K=%d (algorithm %d, tile %d): %w", a.M, a.N, a.K, p.AlgoID, p.TileID, err)
		}
		return nil
	})
	if err == nil && d.sync && a.M > 0 {
		return d.c.Sync()
	}
	return err
}

func (d *driverDevice) Name() string {
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d SMs)", d.c.Ordinal, d.c.Name, d.c.Major, d.c.Minor, d.c.SMs)
}

func (d *driverDevice) MemInfo() (int64, int64, error) { return d.c.MemInfo() }

func (d *driverDevice) Alloc(n int64) (dev.Ptr, error) {
	p, err := d.c.Alloc(n)
	return dev.Ptr(p), err
}

func (d *driverDevice) Free(p dev.Ptr) error { return d.c.Free(uintptr(p)) }

// Upload copies through the pinned staging buffer, a chunk at a time.
func (d *driverDevice) Upload(dst dev.Ptr, src []byte) error {
	for off := 0; off < len(src); off += stagingBytes {
		n := copy(d.staging.Bytes, src[off:])
		if err := d.c.CopyHtoDAsync(uintptr(dst)+uintptr(off), d.staging, 0, n); err != nil {
			return err
		}
		if err := d.c.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// Download copies through the pinned staging buffer after the stream's work.
func (d *driverDevice) Download(dst []byte, src dev.Ptr) error {
	for off := 0; off < len(dst); off += stagingBytes {
		n := min(stagingBytes, len(dst)-off)
		if err := d.c.CopyDtoHAsync(d.staging, 0, uintptr(src)+uintptr(off), n); err != nil {
			return err
		}
		if err := d.c.Sync(); err != nil {
			return err
		}
		copy(dst[off:off+n], d.staging.Bytes)
	}
	return nil
}

func (d *driverDevice) Memset(p dev.Ptr, v byte, n int64) error { return d.c.Memset(uintptr(p), v, n) }

func (d *driverDevice) Copy(dst, src dev.Ptr, n int64) error {
	return d.c.CopyDtoD(uintptr(dst), uintptr(src), n)
}

func (d *driverDevice) Launch(k dev.Kernel, grid, block dev.Dim3, shmem int, args []byte) error {
	if err := d.c.Launch(d.fns[k], grid, block, uint32(shmem), args); err != nil {
		return err
	}
	if d.sync {
		return d.c.Sync()
	}
	return nil
}

func (d *driverDevice) Sync() error { return d.c.Sync() }

// Run runs fn on the context's goroutine, where the device calls inside it are direct.
func (d *driverDevice) Run(fn func() error) error { return d.c.Do(fn) }

func (d *driverDevice) BeginCapture() error { return d.c.BeginCapture() }

func (d *driverDevice) EndCapture() (dev.Graph, error) {
	g, err := d.c.EndCapture()
	if err != nil {
		return nil, err
	}
	return &driverGraph{g: g}, nil
}

func (d *driverDevice) LaunchGraph(g dev.Graph) error {
	dg, ok := g.(*driverGraph)
	if !ok {
		return fmt.Errorf("cuda: foreign graph %T", g)
	}
	return d.c.LaunchGraph(dg.g)
}

func (d *driverDevice) Elapsed(fn func() error) (float32, error) {
	start, err := d.c.NewEvent()
	if err != nil {
		return 0, err
	}
	end, err := d.c.NewEvent()
	if err != nil {
		return 0, err
	}
	defer func() { _ = d.c.DestroyEvent(start); _ = d.c.DestroyEvent(end) }()
	if err := d.c.Record(start); err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, err
	}
	if err := d.c.Record(end); err != nil {
		return 0, err
	}
	if err := d.c.Wait(end); err != nil {
		return 0, err
	}
	return d.c.Elapsed(start, end)
}

func (d *driverDevice) Close() error {
	var errs []error
	if d.lt != nil {
		errs = append(errs, d.c.Do(func() error {
			var errs []error
			for _, p := range d.plans {
				errs = append(errs, p.Destroy())
			}
			return errors.Join(append(errs, d.lt.Destroy())...)
		}))
		errs = append(errs, d.Free(d.ltWork))
		d.lt = nil
	}
	if d.staging != nil {
		errs = append(errs, d.c.FreeHost(d.staging))
	}
	if d.mod != nil {
		errs = append(errs, d.c.Unload(d.mod))
	}
	errs = append(errs, d.c.Close())
	return errors.Join(errs...)
}
