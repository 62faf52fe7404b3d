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
	// top holds the held-back ids' top logprobs (k per id), when requested.
	top topLogprobs
}

func newGate(stream bool, interval int) gate {
	return gate{interval: max(interval, 1), whole: !stream}
}

// push takes one step's output of the request (ids and their logprobs, the latter empty when
// not requested) and returns what goes out now; send is false when it is all held back. The
// result is the step's own slices when nothing was held back, else the gate's buffer (holding
// then reports true until flushed).
func (g *gate) push(ids []int32, logprobs []float32, finished bool) (outIDs []int32, outLogprobs []float32, send bool) {
	outIDs, outLogprobs, _, send = g.pushTop(ids, logprobs, topLogprobs{}, finished)
	return outIDs, outLogprobs, send
}

// pushTop is push for output that carries each id's top logprobs as well.
func (g *gate) pushTop(ids []int32, logprobs []float32, top topLogprobs, finished bool) (outIDs []int32, outLogprobs []float32, outTop topLogprobs, send bool) {
	outIDs, outLogprobs, outTop = ids, logprobs, top
	if len(g.ids) > 0 {
		g.buffer(ids, logprobs, top)
		outIDs, outLogprobs, outTop = g.ids, g.logprobs, g.top
	}
	if !finished && (g.whole || len(outIDs) == 0 || (g.sentAny && len(outIDs) < g.interval)) {
		if len(g.ids) == 0 { // not appended above
			g.buffer(ids, logprobs, top)
		}
		return nil, nil, topLogprobs{}, false
	}
	g.sentAny = true
	return outIDs, outLogprobs, outTop, true
}

// buffer appends one step's output to what is held back.
func (g *gate) buffer(ids []int32, logprobs []float32, top topLogprobs) {
	g.ids = append(g.ids, ids...)
	g.logprobs = append(g.logprobs, logprobs...)
	g.top.ids = append(g.top.ids, top.ids...)
	g.top.logprobs = append(g.top.logprobs, top.logprobs...)
}

// holding reports whether the last push that sent returned the gate's own buffer.
func (g *gate) holding() bool { return len(g.ids) > 0 }

// flushed empties the buffer after its contents went out.
func (g *gate) flushed() {
	g.ids, g.logprobs = g.ids[:0], g.logprobs[:0]
	g.top.ids, g.top.logprobs = g.top.ids[:0], g.top.logprobs[:0]
}
