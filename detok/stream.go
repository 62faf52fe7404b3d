package detok

import (
	"strings"
)

// TokenDecoder turns token ids into text incrementally
// ((*tokenizer.Decoder) satisfies it). Add returns the text the ids
// complete, never ending in a partial UTF-8 character; Flush returns what
// is still held back once the sequence has ended.
type TokenDecoder interface {
	Add(ids []int32) string
	Flush() string
}

// Stream is one request's detokenization state. It is not safe for
// concurrent use; each request's outputs arrive in order on one goroutine.
//
// Stop strings: the text a Stream returns never contains a stop string nor
// anything after it. When several stop strings occur, the one starting
// earliest in the text wins (the shortest among those starting at the same
// place), exactly as if the whole text were searched at once; so text that
// may still turn into a stop string is held back until more text decides
// it, and released at finish. A stop string that completed but could still
// be pre-empted by a longer one starting earlier is held as well.
//
// Memory is O(longest stop string): only the undecided tail is kept, never
// the whole text, and each Push costs time linear in its own text.
type Stream struct {
	dec     TokenDecoder
	stops   []string
	maxStop int // length in bytes of the longest stop string

	held     string // decoded text not yet returned: a possible stop-string start
	stopped  bool
	finished bool
	matched  string
	// closed is set when the stream's Table closes it (a caller's cached pointer is stale).
	closed bool
}

// NewStream returns the state for one request. Empty stop strings are
// ignored (they would match before any text).
func NewStream(dec TokenDecoder, stop []string) *Stream {
	s := &Stream{dec: dec}
	for _, st := range stop {
		if st == "" {
			continue
		}
		s.stops = append(s.stops, st)
		s.maxStop = max(s.maxStop, len(st))
	}
	return s
}

// Push adds newly generated ids (finished: the request has ended) and
// returns the text that is now final. stopped reports that a stop string
// matched (matched is that string); the request should then be finished,
// and every later Push returns "" with stopped still true. After a Push
// with finished set, later Pushes return "".
func (s *Stream) Push(ids []int32, finished bool) (text string, stopped bool, matched string) {
	if s.stopped || s.finished {
		return "", s.stopped, s.matched
	}
	delta := s.dec.Add(ids)
	if finished {
		s.finished = true
		delta += s.dec.Flush()
	}
	if len(s.stops) == 0 {
		return delta, false, ""
	}
	buf := delta
	if s.held != "" {
		buf = s.held + delta
	}

	// Earliest stop match in the undecided text; the held tail is shorter
	// than the longest stop string, so a match spanning earlier deltas
	// always starts inside buf.
	at, stop := -1, ""
	for _, st := range s.stops {
		// A match must start before any match found so far ends.
		limit := len(buf)
		if at >= 0 {
			limit = min(len(buf), at+len(st))
		}
		if i := strings.Index(buf[:limit], st); i >= 0 && (at < 0 || i < at || (i == at && len(st) < len(stop))) {
			at, stop = i, st
		}
	}

	// cut: where the undecided tail starts. It is the first position whose
	// remaining text is a proper prefix of some stop string (more text could
	// complete it), searched only before a found match, and not at all once
	// the sequence has ended.
	cut := len(buf)
	if at >= 0 {
		cut = at
	}
	if !s.finished {
		cut = s.firstPossibleStart(buf, cut)
	}
	if at >= 0 && (cut == at || s.finished) {
		s.stopped, s.matched, s.held = true, stop, ""
		return buf[:at], true, stop
	}
	// Copy the tail so it does not pin a large delta in memory.
	s.held = strings.Clone(buf[cut:])
	return buf[:cut], false, ""
}

// firstPossibleStart returns the smallest i < end such that buf[i:] is a
// proper prefix of some stop string, or end if there is none. Only the last
// maxStop-1 bytes can qualify.
func (s *Stream) firstPossibleStart(buf string, end int) int {
	for i := max(0, len(buf)-s.maxStop+1); i < end; i++ {
		tail := buf[i:]
		for _, st := range s.stops {
			if len(tail) < len(st) && tail[0] == st[0] && strings.HasPrefix(st, tail) {
				return i
			}
		}
	}
	return end
}

// Stopped reports whether a stop string matched, and which.
func (s *Stream) Stopped() (bool, string) { return s.stopped, s.matched }

// Done reports whether the stream is over: finished or stopped.
func (s *Stream) Done() bool { return s.stopped || s.finished }

// HeldBytes is the size of the undecided tail (for tests and metrics).
func (s *Stream) HeldBytes() int { return len(s.held) }
