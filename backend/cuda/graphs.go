package cuda

// graphBuckets are the batch sizes decode steps are captured at (a step runs in the smallest
// bucket that holds it, its extra rows padding): powers of two to 16, then every 8 to 256.
var graphBuckets = func() []int {
	b := []int{1, 2, 4, 8}
	for n := 16; n <= 256; n += 8 {
		b = append(b, n)
	}
	return b
}()

// maxGraphBatch is the largest bucket.
const maxGraphBatch = 256

// bucketFor returns the smallest bucket holding n rows, or 0 when n is beyond every bucket.
func bucketFor(n int) int {
	for _, b := range graphBuckets {
		if b >= n {
			return b
		}
	}
	return 0
}
