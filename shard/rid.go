package shard

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// NewRID returns a fresh request id for a request accepted by tokenizer
// worker `worker`: "w<worker>-" followed by 128 random bits in hex.
//
// The prefix only makes logs readable; ownership always travels as the
// explicit Owner field of wire messages and must never be parsed back out of
// an rid (clients may supply their own rids).
func NewRID(worker int) string {
	var b [16]byte
	// crypto/rand.Read never fails (it aborts the program if the OS source
	// does), so there is no error to handle.
	_, _ = rand.Read(b[:])
	buf := make([]byte, 0, 4+len(b)*2)
	buf = append(buf, 'w')
	buf = strconv.AppendInt(buf, int64(worker), 10)
	buf = append(buf, '-')
	buf = hex.AppendEncode(buf, b[:])
	return string(buf)
}
