//go:build cgo

package ipc

import (
	"testing"

	zmq "github.com/pebbe/zmq4"
)

const cgoEnabled = true

// TestInterop: libzmq and gozmq speak the same ZMTP, so processes built with and without
// cgo can be mixed in one deployment.
func TestInterop(t *testing.T) {
	lib, _ := ByName("libzmq")
	goz, _ := ByName("gozmq")
	for _, pair := range [][2]Transport{{lib, goz}, {goz, lib}} {
		sender, receiver := pair[0], pair[1]
		t.Run(sender.Name()+"->"+receiver.Name(), func(t *testing.T) {
			for _, sc := range schemes {
				r := pull(t, receiver, bindAddr(t, sc), true)
				s := push(t, sender, r.Endpoint(), false)
				for i := range 100 {
					mustSend(t, s, msg(1, uint64(i), i*100))
				}
				for i := range 100 {
					if _, seq := parseMsg(t, mustRecv(t, r)); seq != uint64(i) {
						t.Fatalf("%s: got %d want %d", sc, seq, i)
					}
				}
				if sender.Name() == "libzmq" {
					// A multipart message from a foreign libzmq peer arrives as one frame.
					raw, _ := zmq.NewSocket(zmq.PUSH)
					raw.SetLinger(0)
					if err := raw.Connect(r.Endpoint()); err != nil {
						t.Fatal(err)
					}
					if _, err := raw.SendMessage("ab", "", "c"); err != nil {
						t.Fatal(err)
					}
					if b := mustRecv(t, r); string(b) != "abc" {
						t.Fatalf("multipart arrived as %q", b)
					}
					raw.Close()
				}
			}
		})
	}
}
