package ipc_test

import (
	"fmt"
	"os"
	"time"

	"github.com/llmserve/llmserve/ipc"
)

// A scheduler sends a TokenBatch to detokd over an ipc:// socket in a private run directory.
func Example() {
	dir, err := ipc.TempRunDir("")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	tr := ipc.Default()

	// detokd binds one PULL; every scheduler connects a PUSH to it.
	in, err := tr.Pull(ipc.Endpoint(dir, "detokd"), true)
	if err != nil {
		panic(err)
	}
	defer in.Close()
	out, err := tr.Push(ipc.Endpoint(dir, "detokd"), false, ipc.WithSendTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer out.Close()

	var buf []byte
	batch := ipc.TokenBatch{Rank: 0, Seq: 1, Load: ipc.Load{Running: 1, Received: []uint64{1}},
		Items: []ipc.TokenItem{{RID: "r1", NewIDs: []int32{42}, CompletionTokens: 1, MatchedStopToken: -1}}}
	buf = batch.Append(buf[:0]) // reuse one buffer across sends; Send copies it
	if err := out.Send(buf); err != nil {
		panic(err)
	}

	frame, err := in.Recv(20 * time.Second)
	if err != nil {
		panic(err)
	}
	var got ipc.TokenBatch // reuse across receives: Decode recycles its slices
	if err := got.Decode(frame); err != nil {
		panic(err)
	}
	fmt.Println(got.Seq, got.Items[0].RID, got.Items[0].NewIDs)
	// Output: 1 r1 [42]
}
