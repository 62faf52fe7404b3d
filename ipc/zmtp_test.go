package ipc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"
)

func TestZMTPFraming(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	bodies := [][]byte{{}, []byte("short"), bytes.Repeat([]byte{7}, 255), bytes.Repeat([]byte{9}, 256), bytes.Repeat([]byte{1}, 70000)}
	for _, b := range bodies {
		if err := writeFrame(w, b); err != nil {
			t.Fatal(err)
		}
	}
	// A command (skipped) and a three-part message (joined) as another ZMTP peer may send.
	w.Write([]byte{zmtpCommand, 5, 4, 'P', 'I', 'N', 'G'})
	w.Write([]byte{zmtpMore, 2, 'a', 'b', zmtpMore, 0, 0, 1, 'c'})
	w.Flush()
	r := bufio.NewReader(&buf)
	for i, want := range append(bodies, []byte("abc")) {
		got, err := readMessage(r)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("message %d: %d bytes, err %v; want %d bytes", i, len(got), err, len(want))
		}
	}
	if _, err := readMessage(r); err == nil {
		t.Fatal("read past the end")
	}
}

func TestZMTPRejectsHugeFrame(t *testing.T) {
	hdr := []byte{zmtpLong, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(hdr[1:], 1<<62)
	if _, err := readMessage(bufio.NewReader(bytes.NewReader(hdr))); err == nil {
		t.Fatal("accepted a frame of 2^62 bytes")
	}
	// Parts that each fit but together exceed the limit.
	var parts []byte
	for range 3 {
		h := []byte{zmtpLong | zmtpMore, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(h[1:], MaxFrameSize/2+1)
		parts = append(parts, h...)
	}
	if _, err := readMessage(bufio.NewReader(bytes.NewReader(parts))); err == nil {
		t.Fatal("accepted a multipart message over MaxFrameSize")
	}
}

func FuzzReadMessage(f *testing.F) {
	f.Add([]byte{0, 3, 'a', 'b', 'c'})
	f.Add([]byte{zmtpMore, 1, 'x', 0, 1, 'y'})
	f.Add([]byte{zmtpLong, 0, 0, 0, 0, 0, 0, 1, 0})
	f.Add([]byte{zmtpCommand, 2, 1, 'X', 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			msg, err := readMessage(r)
			if err != nil {
				return
			}
			if len(msg) > len(in) {
				t.Fatalf("%d-byte message from %d input bytes", len(msg), len(in))
			}
		}
	})
}
