package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmserve/llmserve/model"
	"github.com/llmserve/llmserve/tokenizer"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// writePicoGGUF writes the committed pico model (BF16 weights, its tokenizer and chat template)
// as a GGUF file.
func writePicoGGUF(t *testing.T) string {
	t.Helper()
	m, err := model.Load(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	w, err := m.GGUFWriter()
	if err != nil {
		t.Fatal(err)
	}
	if err := tokenizer.SetGGUFMetadata(w, modelPath, m.Config.VocabSize); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pico.gguf")
	if err := w.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// makeRunModel starts `make run` with MODEL_PATH and the given port, as a user would, and stops its
// process group when the test ends.
func makeRunModel(t *testing.T, modelFile string, port int) string {
	t.Helper()
	runDir, err := os.MkdirTemp("", "llmse2e-gguf-")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	cmd := exec.Command("make", "run")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "MODEL_PATH="+modelFile, "PORT="+strconv.Itoa(port), "HOST=127.0.0.1",
		"LLMSERVE_RUN_DIR="+runDir, "OPENBLAS_NUM_THREADS=1")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		os.RemoveAll(runDir)
		if t.Failed() {
			t.Logf("make run output:\n%s", tail(log.String(), 6000))
		}
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(3 * time.Minute) // make run builds the binaries first
	for inRow := 0; inRow < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("make run MODEL_PATH=%s not healthy after 3 minutes:\n%s", modelFile, tail(log.String(), 4000))
		}
		resp, err := freshClient.Get(base + "/health")
		if err == nil && resp.StatusCode == 200 {
			inRow++
		} else {
			inRow = 0
		}
		if err == nil {
			resp.Body.Close()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return base
}

// chat posts a non-streamed chat completion and returns its content and prompt token count.
func chat(t *testing.T, base string, body map[string]any) (string, int) {
	t.Helper()
	code, out := postWith(http.DefaultClient, base+"/v1/chat/completions", body)
	var r struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code != 200 || json.Unmarshal([]byte(out), &r) != nil || len(r.Choices) != 1 {
		t.Fatalf("chat completion: %d %s", code, out)
	}
	return r.Choices[0].Message.Content, r.Usage.PromptTokens
}

// TestMakeRunGGUF serves the pico model from a GGUF file with `make run MODEL_PATH=pico.gguf` (served
// as "pico", the file's stem) and checks that chat (the template comes from the file), streaming and structured output answer
// exactly as the same model served from its Hugging Face directory.
func TestMakeRunGGUF(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the whole engine with make run")
	}
	path := writePicoGGUF(t)
	ref := startEngine(t, engineOpts{})
	t.Cleanup(ref.stopAll)
	base := makeRunModel(t, path, freePort(t))

	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := getJSONWith(http.DefaultClient, base+"/v1/models", &models); err != nil || len(models.Data) != 1 || models.Data[0].ID != "pico" {
		t.Fatalf("/v1/models: %+v %v", models, err)
	}
	msgs := []map[string]any{{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colors."}}
	greedy := map[string]any{"model": "pico", "messages": msgs, "max_tokens": 24, "temperature": 0}
	got, gotPrompt := chat(t, base, greedy)
	want, wantPrompt := chat(t, ref.base, greedy)
	if got != want || gotPrompt != wantPrompt || gotPrompt == 0 {
		t.Errorf("GGUF chat %q (%d prompt tokens), directory %q (%d)", got, gotPrompt, want, wantPrompt)
	}

	stream := map[string]any{"model": "pico", "messages": msgs, "max_tokens": 24, "temperature": 0, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "return_token_ids": true}
	e := &engine{t: t, base: base}
	text, ids, usage, finish := completionStream(t, e, "/v1/chat/completions", stream)
	if text != got || usage["completion_tokens"] != len(ids) || finish == "" {
		t.Errorf("streamed chat %q (%d ids, usage %v, finish %q), non-streamed %q", text, len(ids), usage, finish, got)
	}

	schema := constrainedSchemas["person"]
	sch := compileSchema(t, schema)
	for _, st := range []bool{false, true} {
		call := constrainedCall{schema: "person", chat: true, stream: st}
		out, _, err := e.constrained(call, 11)
		if err != nil {
			t.Fatalf("%v: %v", call, err)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Fatalf("%v: output %q is not JSON: %v", call, out, err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%v: output %q does not validate: %v", call, out, err)
		}
		refOut, _, err := ref.constrained(call, 11)
		if err != nil {
			t.Fatal(err)
		}
		if out != refOut {
			t.Errorf("%v: GGUF %q, directory %q", call, out, refOut)
		}
	}
}
