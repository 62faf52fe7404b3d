package api

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"time"
	"unicode/utf8"
)

// streamSSE writes st to the client as server-sent events: the first tokens at once, then every
// interval tokens, then the rest on finish; a delta that carries an error still carries every
// token produced before it, so nothing is lost. It reports whether the stream was written to
// its end (false: the client went away or stopped reading).
func (s *Server) streamSSE(ctx context.Context, w http.ResponseWriter, st *Stream, interval int, f outputFormat, start time.Time) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(s.writeDeadline())
	w.WriteHeader(http.StatusOK)
	var buf []byte
	var d Delta // recycled: Take hands its buffers back to the stream
	first := true
	last := start
	for {
		want := interval
		if first {
			want = 1
		}
		if err := st.Take(ctx, want, &d); err != nil {
			if context.Cause(ctx) != errShuttingDown {
				return false // client gone
			}
			// Stopped: take what is pending (Take returns it at once) and end with an error.
			if st.Take(ctx, 1, &d) != nil {
				d = Delta{}
			}
			d.Finished, d.FinishReason, d.Err = true, FinishAbort, errShuttingDown
			d.PromptTokens, d.CachedTokens, d.CompletionTokens = st.Usage()
		}
		if !first && !d.Finished {
			// Let the goroutines that are ready run once before writing: when the worker is
			// busy, more of this request's output arrives meanwhile and goes out in this chunk,
			// so a loaded worker writes fewer, bigger chunks (each write and each wake-up of the
			// client costs more than the bytes); an idle one comes straight back. The first
			// chunk never waits.
			runtime.Gosched()
			st.TakeMore(&d)
		}
		now := time.Now()
		if len(d.IDs) > 0 {
			if !first {
				s.met.itl.Observe(now.Sub(last).Seconds() / float64(len(d.IDs)))
			}
			last = now
		}
		buf = f.chunk(buf[:0], &d, first)
		first = false
		if d.Finished {
			if t, ok := f.(interface{ streamsDone() bool }); !ok || t.streamsDone() {
				buf = append(buf, "data: [DONE]\n\n"...)
			}
			s.met.finished(&d, st, start)
		}
		_ = rc.SetWriteDeadline(s.writeDeadline()) // a client that stops reading is cut
		if _, err := w.Write(buf); err != nil {
			return false
		}
		if err := rc.Flush(); err != nil {
			return false
		}
		if d.Finished {
			return true
		}
	}
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal (invalid UTF-8 becomes U+FFFD).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendIDs(dst []byte, ids []int32) []byte {
	dst = append(dst, '[')
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, ']')
}

func appendFloat(dst []byte, f float32) []byte {
	return strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
}

func appendErrorEvent(dst []byte, err error) []byte {
	dst = append(dst, `data: {"error":{"message":`...)
	dst = appendJSONString(dst, clipMessage(err.Error()))
	if outputStatus(err) == http.StatusBadRequest { // a rank refused the request
		return append(dst, `,"type":"invalid_request_error","code":400}}`+"\n\n"...)
	}
	return append(dst, `,"type":"server_error","code":500}}`+"\n\n"...)
}
