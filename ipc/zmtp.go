package ipc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// MaxFrameSize is the largest frame either transport sends or accepts (libzmq's
// ZMQ_MAXMSGSIZE is set to it). A peer announcing a larger frame is disconnected instead of
// making us allocate whatever its length prefix claims.
const MaxFrameSize = 1 << 30

// ZMTP 3 message framing (rfc.zeromq.org/spec/23): a flags byte, then the body size as one
// byte or, with the long flag, eight big-endian bytes, then the body. The gozmq transport
// lets go-zeromq do the handshake and frames messages itself: go-zeromq's reader allocates
// whatever size a peer announces, and its writer allocates a message per send.
const (
	zmtpMore    = 0x01
	zmtpLong    = 0x02
	zmtpCommand = 0x04
)

// writeFrame buffers one single-part message.
func writeFrame(w *bufio.Writer, body []byte) error {
	var hdr [9]byte
	n := 2
	if len(body) <= 255 {
		hdr[1] = byte(len(body))
	} else {
		hdr[0] = zmtpLong
		binary.BigEndian.PutUint64(hdr[1:], uint64(len(body)))
		n = 9
	}
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// readMessage reads the next message, joining the parts of a multipart message into one
// frame and skipping commands (we use no heartbeats, so none needs an answer).
func readMessage(r *bufio.Reader) ([]byte, error) {
	msg := []byte{}
	for {
		flags, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		var size uint64
		if flags&zmtpLong != 0 {
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return nil, err
			}
			size = binary.BigEndian.Uint64(b[:])
		} else {
			b, err := r.ReadByte()
			if err != nil {
				return nil, err
			}
			size = uint64(b)
		}
		if size > MaxFrameSize || uint64(len(msg))+size > MaxFrameSize {
			return nil, fmt.Errorf("ipc: peer sent a %d-byte frame, limit %d", size, MaxFrameSize)
		}
		if flags&zmtpCommand != 0 {
			if _, err := r.Discard(int(size)); err != nil {
				return nil, err
			}
			continue
		}
		if msg, err = readBody(r, msg, int(size)); err != nil {
			return nil, err
		}
		if flags&zmtpMore == 0 {
			return msg, nil
		}
	}
}

// readBody appends size bytes to dst, growing it as the bytes arrive rather than trusting
// size up front, so a peer that announces a big frame and sends little costs little.
func readBody(r *bufio.Reader, dst []byte, size int) ([]byte, error) {
	const chunk = 1 << 20
	for size > 0 {
		n := min(size, chunk)
		old := len(dst)
		dst = slices.Grow(dst, n)[:old+n]
		if _, err := io.ReadFull(r, dst[old:]); err != nil {
			return nil, err
		}
		size -= n
	}
	return dst, nil
}
