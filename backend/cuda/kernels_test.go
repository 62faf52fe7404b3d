package cuda

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// rebuildHint is what a stale MANIFEST's failure tells the reader to do.
const rebuildHint = "kernel sources must match backend/cuda/kernels/MANIFEST: rebuild the fatbin on a GPU machine " +
	"(scripts/gpu/check.sh, which runs make -C backend/cuda/kernels fatbin) and commit kernels.fatbin and MANIFEST; " +
	"while no fatbin exists yet, `make -C backend/cuda/kernels manifest-unbuilt` rewrites MANIFEST"

func TestManifestMatchesSources(t *testing.T) {
	m, err := readManifest()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := staleSources(os.DirFS("kernels"), m)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("%s:\n  %s", rebuildHint, strings.Join(problems, "\n  "))
	}
	if m.built {
		data, err := os.ReadFile("kernels/kernels.fatbin")
		if err != nil {
			t.Fatalf("MANIFEST lists a fatbin: %v", err)
		}
		if sha256Hex(data) != m.fatbinSHA {
			t.Fatalf("kernels.fatbin does not match MANIFEST: %s", rebuildHint)
		}
	} else if _, err := os.Stat("kernels/kernels.fatbin"); err == nil {
		t.Fatal("kernels.fatbin exists but MANIFEST says it is not built")
	}
}

// The staleness check itself: an edited, added or removed source is reported.
func TestStaleSourcesDetectsEdits(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.cu", "A")
	write("b.cuh", "B")
	m := &manifest{notBuilt: "x", sources: map[string]string{"a.cu": sha256Hex([]byte("A")), "b.cuh": sha256Hex([]byte("B")), "gone.cu": sha256Hex(nil)}, names: []string{"a.cu", "b.cuh", "gone.cu"}}
	write("b.cuh", "B2")
	write("new.cu", "N")
	got, err := staleSources(os.DirFS(dir), m)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"b.cuh changed since MANIFEST was written", "new.cu is not in MANIFEST", "MANIFEST lists gone.cu, which does not exist"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Until a GPU machine has built the fatbin, a real device must refuse with the MANIFEST's words.
func TestNoFatbinRefusal(t *testing.T) {
	m, err := readManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.built {
		t.Skip("the fatbin is built")
	}
	t.Setenv(FatbinEnv, "")
	_, err = fatbin()
	if !errors.Is(err, dev.ErrNoFatbin) || !strings.Contains(err.Error(), "not built yet") {
		t.Fatalf("fatbin() = %v, want ErrNoFatbin quoting MANIFEST", err)
	}
}

var (
	entryRe  = regexp.MustCompile(`(?s)\.entry (\w+)\(\s*(.*?)\)`)
	paramRe  = regexp.MustCompile(`\.param (\.\w+) \w+`)
	kernelRe = regexp.MustCompile(`(?s)extern "C" __global__ void (\w+)\((.*?)\)`)
)

// clangPTX compiles one source to PTX the way CI does.
func clangPTX(t *testing.T, clang, src string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(src)+".ptx")
	cmd := exec.Command(clang, "-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80",
		"-Xclang", "-target-feature", "-Xclang", "+ptx75", "-O2", "-Werror", "-S", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, msg)
	}
	ptx, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(ptx)
}

// TestKernelsCompile compiles every kernel source with clang (CUDA without headers) and checks
// each kernel's parameter list, as PTX declares it and as the source names it, against its Go
// argument struct. make kernels-check sets LLMSERVE_REQUIRE_CLANG so CI cannot skip it.
func TestKernelsCompile(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		if os.Getenv("LLMSERVE_REQUIRE_CLANG") != "" {
			t.Fatalf("clang is required (scripts/setup.sh installs it): %v", err)
		}
		t.Skipf("no clang (scripts/setup.sh installs it): %v", err)
	}
	files, err := filepath.Glob("kernels/*.cu")
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string][]string{} // kernel -> PTX param types
	sources := map[string]string{}   // kernel -> C parameter list
	fileOf := map[string]string{}
	for _, f := range files {
		ptx := clangPTX(t, clang, f)
		if filepath.Base(f) == "all.cu" {
			continue // compiled to catch clashes between sources; its kernels are counted per file
		}
		for _, e := range entryRe.FindAllStringSubmatch(ptx, -1) {
			var types []string
			for _, p := range paramRe.FindAllStringSubmatch(e[2], -1) {
				types = append(types, p[1])
			}
			entries[e[1]] = types
			fileOf[e[1]] = filepath.Base(f)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kernelRe.FindAllStringSubmatch(string(src), -1) {
			sources[k[1]] = k[2]
		}
	}
	for k, info := range dev.Kernels {
		types, ok := entries[info.Name]
		if !ok {
			t.Errorf("kernel %d (%s) has no .entry in the PTX of kernels/%s", k, info.Name, info.File)
			continue
		}
		if fileOf[info.Name] != info.File {
			t.Errorf("%s is in %s, the table says %s", info.Name, fileOf[info.Name], info.File)
		}
		params, err := dev.Params(info.Args)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, p := range params {
			want = append(want, p.Type)
		}
		if !slices.Equal(types, want) {
			t.Errorf("%s: PTX parameters %v, Go struct %s gives %v", info.Name, types, info.Args.Name(), want)
		}
		var cNames []string
		for _, decl := range strings.Split(sources[info.Name], ",") {
			fields := strings.Fields(strings.TrimSpace(decl))
			name := strings.TrimLeft(fields[len(fields)-1], "*")
			cNames = append(cNames, strings.ToLower(strings.ReplaceAll(name, "_", "")))
		}
		var goNames []string
		for _, p := range params {
			goNames = append(goNames, strings.ToLower(p.Name))
		}
		if !slices.Equal(cNames, goNames) {
			t.Errorf("%s: source parameters %v, Go struct %s fields %v (compared without case and underscores)", info.Name, cNames, info.Args.Name(), goNames)
		}
		delete(entries, info.Name)
	}
	for name := range entries {
		t.Errorf("kernel %s is compiled but not in the dev.Kernels table", name)
	}
}
