package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// cdp is a Chrome DevTools Protocol connection over --remote-debugging-pipe: JSON messages, each
// ended by a NUL byte, written to the browser's fd 3 and read from its fd 4.
type cdp struct {
	w      *os.File
	mu     sync.Mutex // guards nextID and waiting
	nextID int
	// waiting maps a command's id to where its result goes.
	waiting map[int]chan cdpReply
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (c *cdp) read(r *os.File) {
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m struct {
			ID int `json:"id"`
			cdpReply
		}
		if json.Unmarshal(bytes.TrimSuffix(msg, []byte{0}), &m) != nil || m.ID == 0 {
			continue // an event
		}
		c.mu.Lock()
		ch := c.waiting[m.ID]
		delete(c.waiting, m.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m.cdpReply
		}
	}
}

// call sends a command (to a page's session when session is set) and waits for its result.
func (c *cdp) call(session, method string, params any, result any) error {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan cdpReply, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	if _, err := c.w.Write(append(b, 0)); err != nil {
		return err
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(r.Result, result)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer in 30 s", method)
	}
}

// chromium is the headless browser the page test drives, or "" when none is installed.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The chat page in a real browser: the test types a message, presses Enter, and reads the answer
// the page streamed from the engine.
func TestChatPageInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no Chromium on PATH (Debian: apt-get install chromium; make setup installs it)")
	}
	e := startEngine(t, engineOpts{})
	toBrowser, ourEnd, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ourRead, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
		"--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), e.base+"/")
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser} // fd 3: commands in; fd 4: answers out
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("chromium stderr:\n%s", tail(stderr.String(), 3000))
		}
	})
	c := &cdp{w: ourEnd, waiting: map[int]chan cdpReply{}}
	go c.read(ourRead)

	// The page the browser opened: attach to it.
	var session string
	for deadline := time.Now().Add(30 * time.Second); session == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var targets struct {
			TargetInfos []struct {
				TargetID string `json:"targetId"`
				Type     string `json:"type"`
				URL      string `json:"url"`
			} `json:"targetInfos"`
		}
		if err := c.call("", "Target.getTargets", map[string]any{}, &targets); err != nil {
			t.Fatal(err)
		}
		for _, ti := range targets.TargetInfos {
			if ti.Type == "page" && strings.HasPrefix(ti.URL, e.base) {
				var att struct {
					SessionID string `json:"sessionId"`
				}
				if err := c.call("", "Target.attachToTarget", map[string]any{"targetId": ti.TargetID, "flatten": true}, &att); err != nil {
					t.Fatal(err)
				}
				session = att.SessionID
			}
		}
	}
	if session == "" {
		t.Fatal("no page target for the engine's page")
	}
	eval := func(expr string) string {
		t.Helper()
		var r struct {
			Result struct {
				Value any `json:"value"`
			} `json:"result"`
		}
		if err := c.call(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(r.Result.Value)
	}
	// Wait for the page to know the model, then type and send.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if m := eval(`document.getElementById("model") ? document.getElementById("model").textContent : ""`); strings.Contains(m, "max_model_len") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the page never showed the model: %q", m)
		}
	}
	eval(`document.getElementById("temperature").value = "0"; document.getElementById("maxTokens").value = "12"; "ok"`)
	if err := c.call(session, "Runtime.evaluate", map[string]any{"expression": `document.getElementById("input").focus()`}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.call(session, "Input.insertText", map[string]any{"text": "Say hello"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"keyDown", "keyUp"} {
		if err := c.call(session, "Input.dispatchKeyEvent", map[string]any{"type": typ, "key": "Enter", "code": "Enter",
			"windowsVirtualKeyCode": 13, "text": "\r"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var state, answer string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		state = eval(`(document.querySelector(".msg.assistant, .msg.error") || {dataset: {}}).dataset.state || ""`)
		if state == "done" || state == "error" {
			break
		}
	}
	answer = eval(`Array.from(document.querySelectorAll(".msg")).map(d => d.className + ": " + d.textContent).join("\n")`)
	if state != "done" || !strings.Contains(answer, "msg user: Say hello") {
		t.Fatalf("page state %q; transcript:\n%s", state, answer)
	}
	// The answer on the page is the one the API gives for the same request (greedy).
	code, body := e.post("/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "Say hello"}},
		"temperature": 0, "max_tokens": 12})
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if code != 200 || json.Unmarshal(body, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("the same request through the API: %d %s", code, body)
	}
	shown := eval(`document.querySelector(".msg.assistant").textContent`)
	if shown != out.Choices[0].Message.Content || shown == "" {
		t.Fatalf("the page shows %q, the API answers %q", shown, out.Choices[0].Message.Content)
	}
	t.Logf("the page streamed %q", shown)
}
