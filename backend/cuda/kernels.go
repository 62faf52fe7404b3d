package cuda

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/llmserve/llmserve/backend/cuda/internal/dev"
)

// kernelFiles holds the kernel sources, their MANIFEST and, once a GPU machine has built it,
// kernels.fatbin.
//
//go:embed kernels
var kernelFiles embed.FS

// FatbinEnv names a fatbin file to load instead of the embedded one (scripts/gpu/check.sh sets it
// to the fatbin it has just built).
const FatbinEnv = "LLMSERVE_CUDA_FATBIN"

// manifest is kernels/MANIFEST.
type manifest struct {
	// built reports a fatbin built from these sources; fatbinSHA is its sha256 and notBuilt
	// the MANIFEST's explanation when there is none.
	built     bool
	fatbinSHA string
	notBuilt  string
	// nvcc and flags are how it was (or will be) built.
	nvcc, flags string
	// sources maps each source's name to its sha256, in MANIFEST order in names.
	sources map[string]string
	names   []string
}

func parseManifest(data []byte) (*manifest, error) {
	m := &manifest{sources: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, fmt.Errorf("MANIFEST line %d: %q has no key", n, line)
		}
		switch key {
		case "fatbin":
			if sha, ok := strings.CutPrefix(val, "built sha256 "); ok {
				m.built, m.fatbinSHA = true, sha
			} else {
				m.notBuilt = val
			}
		case "nvcc":
			m.nvcc = val
		case "flags":
			m.flags = val
		case "source":
			name, sha, ok := strings.Cut(val, " ")
			if !ok || len(sha) != 64 {
				return nil, fmt.Errorf("MANIFEST line %d: source %q wants a name and a sha256", n, val)
			}
			m.sources[name] = sha
			m.names = append(m.names, name)
		default:
			return nil, fmt.Errorf("MANIFEST line %d: unknown key %q", n, key)
		}
	}
	if !m.built && m.notBuilt == "" {
		return nil, fmt.Errorf("MANIFEST has no fatbin line")
	}
	return m, nil
}

func readManifest() (*manifest, error) {
	data, err := kernelFiles.ReadFile("kernels/MANIFEST")
	if err != nil {
		return nil, fmt.Errorf("cuda kernels: %w", err)
	}
	return parseManifest(data)
}

// fatbin returns the kernels image a real device loads: the file FatbinEnv names, else the
// embedded kernels.fatbin, checked against its MANIFEST. Without one it returns an error
// wrapping dev.ErrNoFatbin.
func fatbin() ([]byte, error) {
	if path := os.Getenv(FatbinEnv); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("cuda kernels: %s: %w", FatbinEnv, err)
		}
		return data, nil
	}
	m, err := readManifest()
	if err != nil {
		return nil, err
	}
	if !m.built {
		return nil, fmt.Errorf("%w (MANIFEST: %s)", dev.ErrNoFatbin, m.notBuilt)
	}
	data, err := kernelFiles.ReadFile("kernels/kernels.fatbin")
	if err != nil {
		return nil, fmt.Errorf("cuda kernels: MANIFEST lists a fatbin but it is missing: %w", err)
	}
	if got := sha256Hex(data); got != m.fatbinSHA {
		return nil, fmt.Errorf("cuda kernels: kernels.fatbin has sha256 %s, MANIFEST says %s: rebuild it (scripts/gpu/check.sh)", got, m.fatbinSHA)
	}
	return data, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// staleSources compares the sources in fsys (the kernels directory) with the MANIFEST's hashes
// and describes every difference.
func staleSources(fsys fs.FS, m *manifest) ([]string, error) {
	var problems []string
	seen := map[string]bool{}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".cu") || strings.HasSuffix(name, ".cuh")) {
			continue
		}
		seen[name] = true
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		want, ok := m.sources[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is not in MANIFEST", name))
		case sha256Hex(data) != want:
			problems = append(problems, fmt.Sprintf("%s changed since MANIFEST was written", name))
		}
	}
	for _, name := range m.names {
		if !seen[name] {
			problems = append(problems, fmt.Sprintf("MANIFEST lists %s, which does not exist", name))
		}
	}
	return problems, nil
}
