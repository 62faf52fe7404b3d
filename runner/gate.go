package runner

// gate holds back one request's output between stream flushes: the first tokens go out at once,
// then every interval tokens, and everything left (with the finish, abort or error) at the end;
// a request that is not streamed goes out once, whole, at the end. It is a pure value: no
// sockets, no clocks.
type gate struct {
	interval int  // tokens per flush after the first (>= 1)
	whole    bool // not streamed: one flush, at the finish
	sentAny  bool // the first flush has gone out

	// ids and logprobs are the output held back since the last flush. The buffers are reused:
	// after a push that returns them, the caller calls flushed once it is done with them.
	ids      []int32
	logprobs []float32
}

func newGate(stream bool, interval int) gate {
	return gate{interval: max(interval, 1), whole: !stream}
}

// push takes one step's output of the request (ids and their logprobs, the latter empty when
// not requested) and returns what goes out now; send is false when it is all held back. The
// result is the step's own slices when nothing was held back, else the gate's buffer (holding
// then reports true until flushed).
func (g *gate) push(ids []int32, logprobs []float32, finished bool) (outIDs []int32, outLogprobs []float32, send bool) {
	outIDs, outLogprobs = ids, logprobs
	if len(g.ids) > 0 {
		g.ids = append(g.ids, ids...)
		g.logprobs = append(g.logprobs, logprobs...)
		outIDs, outLogprobs = g.ids, g.logprobs
	}
	if !finished && (g.whole || len(outIDs) == 0 || (g.sentAny && len(outIDs) < g.interval)) {
		if len(g.ids) == 0 { // not appended above
			g.ids = append(g.ids, ids...)
			g.logprobs = append(g.logprobs, logprobs...)
		}
		return nil, nil, false
	}
	g.sentAny = true
	return outIDs, outLogprobs, true
}

// holding reports whether the last push that sent returned the gate's own buffer.
func (g *gate) holding() bool { return len(g.ids) > 0 }

// flushed empties the buffer after its contents went out.
func (g *gate) flushed() { g.ids, g.logprobs = g.ids[:0], g.logprobs[:0] }
