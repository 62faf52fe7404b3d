//go:build !amd64 || purego

package sampling

// Without a vector kernel argmax is the scalar loop; these keep the shared code compiling.
const (
	haveVectorArgmax = false
	maxBlock         = 32
)

func maxBlocks([]float32) float32 { panic("sampling: no vector argmax on this platform") }

func findEqual([]float32, float32) int { panic("sampling: no vector argmax on this platform") }
