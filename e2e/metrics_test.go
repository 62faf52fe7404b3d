package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// prometheus is a real Prometheus server on loopback scraping one engine every second.
type prometheus struct {
	base string
	cmd  *exec.Cmd
	log  *syncBuffer
}

// startPrometheus starts Debian's prometheus (installed by `make setup`) with a temporary
// configuration and storage, scraping target's /metrics every second; the test skips, saying
// why, where the binary is missing.
func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (`make setup` installs Debian's prometheus package): " + err.Error())
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: llmserve\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &prometheus{base: "http://127.0.0.1:" + strconv.Itoa(freePort(t)), log: &syncBuffer{}}
	p.cmd = exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+strings.TrimPrefix(p.base, "http://"))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // none outlives a test binary that panics or times out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("---- prometheus log ----\n%s", tail(p.log.String(), 3000))
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(p.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20s:\n%s", tail(p.log.String(), 3000))
		}
	}
}

// promSample is one series of a query's answer: its labels and its values (one for an instant
// vector, several for a range vector), each a [unix seconds, "value"] pair.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

// query runs a PromQL query at time at through the HTTP API.
func (p *prometheus) query(t *testing.T, q string, at time.Time) []promSample {
	t.Helper()
	v := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixNano())/1e9, 'f', 3, 64)}}
	resp, err := http.Get(p.base + "/api/v1/query?" + v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Status != "success" {
		t.Fatalf("query %s: status %q error %q (%v)", q, out.Status, out.Error, err)
	}
	return out.Data.Result
}

// sampleValue reads a [time, "value"] pair.
func sampleValue(t *testing.T, pair [2]any) (time.Time, float64) {
	t.Helper()
	ts, _ := pair[0].(float64)
	s, _ := pair[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("sample %v: %v", pair, err)
	}
	return time.Unix(0, int64(ts*1e9)), v
}

// counterSamples parses an exposition into its monotonic series (counters, and histograms'
// buckets, sums and counts), keyed by series name and labels.
func counterSamples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	kinds := map[string]string{}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			kinds[f[2]] = f[3]
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		key, val := line[:sp], line[sp+1:]
		name := key
		if i := strings.IndexByte(key, '{'); i >= 0 {
			name = key[:i]
		}
		family := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if k, ok := kinds[strings.TrimSuffix(name, suf)]; ok && k == "histogram" && strings.HasSuffix(name, suf) {
				family = strings.TrimSuffix(name, suf)
			}
		}
		if k := kinds[family]; k != "counter" && k != "histogram" {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[key] = v
	}
	return out
}

// finishedAt is one request the load generator saw finish: when, and its completion tokens.
type finishedAt struct {
	at     time.Time
	tokens int
}

// TestMetricsWithPrometheus runs an engine with 3 tokenizer workers (each connection lands on
// any of them) under a fixed load while a real Prometheus scrapes it every second, and checks
// what an operator relies on: the generation rate Prometheus computes matches what the client
// counted, counters never go down from one scrape to the next whichever worker answers,
// promtool finds nothing to complain about, every query of vLLM's Grafana dashboard returns
// data, and a request's id is in its response, its access line, and the rank's and detokd's
// lines.
func TestMetricsWithPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e")
	}
	e := startEngine(t, engineOpts{workers: 3, dpSize: 2, tokArgs: []string{"--log-format", "json"}})
	prom := startPrometheus(t, strings.TrimPrefix(e.base, "http://"))
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if body, err := httpGet(e.base + "/v1/models"); err != nil || json.Unmarshal([]byte(body), &models) != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %v %s", err, body)
	}
	model := models.Data[0].ID
	// Prometheus's first scrape comes up to a few seconds after its start: the load waits for it.
	for deadline := time.Now().Add(15 * time.Second); len(prom.query(t, `up{job="llmserve"} == 1`, time.Now())) == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("prometheus has not scraped the engine after 15s")
		}
	}

	// A request with the client's id: echoed, and in the worker's access line, the rank's line
	// and detokd's.
	const traceID = "e2e-trace-7f3a"
	req, _ := http.NewRequest("POST", e.base+"/v1/completions",
		strings.NewReader(`{"prompt":"The quick brown fox","max_tokens":5,"ignore_eos":true}`))
	req.Header.Set("X-Request-Id", traceID)
	resp, err := freshClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != traceID {
		t.Fatalf("status %d, X-Request-Id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}

	// A constrained request, so the grammar panels have data.
	constrained := `{"messages":[{"role":"user","content":"a JSON object"}],"max_tokens":8,"response_format":{"type":"json_object"}}`
	if status, out := postWith(freshClient, e.base+"/v1/chat/completions", json.RawMessage(constrained)); status != 200 {
		t.Fatalf("/v1/chat/completions: status %d: %s", status, out)
	}
	// Streamed requests until one has been written in more than one chunk, so the inter-token
	// panels have data: on a fast machine a short stream of the tiny model is done before its
	// first write and goes out whole (coalesced), with no interval between chunks to observe.
	itlKey := fmt.Sprintf(`llm_inter_token_latency_seconds_count{model_name=%q}`, model)
	const streamed = `{"prompt":"Hello","max_tokens":64,"ignore_eos":true,"stream":true}`
	for sent := 1; ; sent++ {
		if status, out := postWith(freshClient, e.base+"/v1/completions", json.RawMessage(streamed)); status != 200 {
			t.Fatalf("streamed /v1/completions: status %d: %s", status, out)
		}
		text, err := httpGetWith(freshClient, e.base+"/metrics")
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		if counterSamples(t, text)[itlKey] > 0 {
			break
		}
		if sent == 50 {
			t.Fatalf("%d streamed requests of 64 tokens, none written in more than one chunk (%s is 0)", sent, itlKey)
		}
	}

	// The load: 6 clients, each sending its next request when the last one finishes, for a
	// fixed time; every response's completion tokens counted with the time it arrived.
	const clients, loadFor = 6, 14 * time.Second
	var (
		mu       sync.Mutex // guards finished and failures
		finished []finishedAt
		failures []string
	)
	loadStart := time.Now()
	loadEnd := loadStart.Add(loadFor)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(loadEnd); i++ {
				body := map[string]any{"model": model, "prompt": fmt.Sprintf("client %d request %d:", c, i),
					"max_tokens": 8 + (c+i)%17, "ignore_eos": true, "temperature": 0}
				status, out := postWith(freshClient, e.base+"/v1/completions", body)
				at := time.Now()
				var r struct {
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				mu.Lock()
				if err := json.Unmarshal([]byte(out), &r); status != 200 || err != nil {
					failures = append(failures, fmt.Sprintf("status %d: %s", status, out))
				} else {
					finished = append(finished, finishedAt{at, r.Usage.CompletionTokens})
				}
				mu.Unlock()
			}
		}()
	}

	// Meanwhile: 100 scrapes on fresh connections (spread over the workers); no monotonic series
	// may go down between two of them. The last one goes to promtool.
	var last string
	prev := map[string]float64{}
	decreases := 0
	for i := range 100 {
		text, err := httpGetWith(freshClient, e.base+"/metrics")
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		cur := counterSamples(t, text)
		if len(cur) < 50 {
			t.Fatalf("scrape %d has %d counter series", i, len(cur))
		}
		for k, v := range cur {
			if p, ok := prev[k]; ok && v < p {
				decreases++
				if decreases <= 5 {
					t.Errorf("scrape %d: %s went down from %v to %v", i, k, p, v)
				}
			}
		}
		prev, last = cur, text
		time.Sleep(time.Duration(int64(loadFor) / 140))
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of the load's requests failed, first: %s", len(failures), failures[0])
	}
	// promtool's only remark may be its lint against ':' in names, which vLLM's names (and so
	// its dashboards) have; anything else is a finding.
	check := exec.Command("promtool", "check", "metrics")
	check.Stdin = strings.NewReader(last)
	out, err := check.CombinedOutput()
	var findings []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !(strings.HasPrefix(line, "vllm:") && strings.HasSuffix(line, "metric names should not contain ':'")) {
			findings = append(findings, line)
		}
	}
	if len(findings) > 0 || (err != nil && len(out) == 0) {
		t.Errorf("promtool check metrics: %v\n%s", err, strings.Join(findings, "\n"))
	}

	// The rate Prometheus computes over the load's steady middle, against the client's count
	// over the same scrapes. The query time is a scrape's own timestamp and the window half a
	// scrape longer than 8 scrapes, so rate() spans exactly the samples it reads (it extrapolates
	// to the window's edges only up to 1.1 scrape intervals).
	time.Sleep(1500 * time.Millisecond) // a scrape after the load
	sel := fmt.Sprintf(`vllm:generation_tokens_total{model_name=%q}`, model)
	all := prom.query(t, sel+"[30s]", time.Now())
	if len(all) != 1 || len(all[0].Values) < 12 {
		t.Fatalf("%s[30s]: %d series, want one with a sample a second: %+v", sel, len(all), all)
	}
	var at time.Time
	for _, pair := range all[0].Values {
		if ts, _ := sampleValue(t, pair); !ts.After(loadEnd.Add(-2 * time.Second)) {
			at = ts
		}
	}
	const window = "8500ms"
	raw := prom.query(t, sel+"["+window+"]", at)
	if len(raw) != 1 || len(raw[0].Values) < 8 {
		t.Fatalf("%s[%s] at %v: %+v", sel, window, at, raw)
	}
	t0, _ := sampleValue(t, raw[0].Values[0])
	t1, _ := sampleValue(t, raw[0].Values[len(raw[0].Values)-1])
	counted := 0
	mu.Lock()
	for _, f := range finished {
		if f.at.After(t0) && !f.at.After(t1) {
			counted += f.tokens
		}
	}
	mu.Unlock()
	clientRate := float64(counted) / t1.Sub(t0).Seconds()
	rate := prom.query(t, "sum(rate("+sel+"["+window+"]))", at)
	if len(rate) != 1 {
		t.Fatalf("sum(rate(...)): %+v", rate)
	}
	_, promRate := sampleValue(t, rate[0].Value)
	t.Logf("generation rate: prometheus %.1f tok/s, client %.1f tok/s (%d tokens over %v); %d requests in all",
		promRate, clientRate, counted, t1.Sub(t0), len(finished))
	if clientRate == 0 || math.Abs(promRate-clientRate) > 0.05*clientRate {
		t.Errorf("prometheus's rate %.1f tok/s is not within 5%% of the client's %.1f tok/s", promRate, clientRate)
	}

	// Every query of vLLM's dashboard returns data, each value a number.
	queries, err := os.ReadFile("testdata/vllm-grafana-queries.txt")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, q := range strings.Split(string(queries), "\n") {
		if q = strings.TrimSpace(q); q != "" && q[0] != '#' {
			exprs = append(exprs, q)
		}
	}
	if len(exprs) < 19 {
		t.Errorf("read %d dashboard queries, want the 19 of the list", len(exprs))
	}
	// And every query of our own dashboard.
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dashJSON, err := os.ReadFile("../deploy/grafana-dashboard.json")
	if err != nil || json.Unmarshal(dashJSON, &dash) != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, q := range exprs {
		q = strings.NewReplacer("$model_name", model, "$__rate_interval", "1m").Replace(q)
		res := prom.query(t, q, time.Now())
		if len(res) == 0 {
			t.Errorf("no data: %s", q)
			continue
		}
		var vals []string
		for _, s := range res {
			_, v := sampleValue(t, s.Value)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s: %v %v", q, s.Metric, v)
			}
			vals = append(vals, strconv.FormatFloat(v, 'g', 4, 64))
		}
		sort.Strings(vals)
		t.Logf("%s = %s", q, strings.Join(vals, " "))
	}

	// The request's id in the worker's JSON access line, the rank's line and detokd's.
	e.mu.Lock()
	tokLog, detLog := e.procs["tokenizerd"].log.String(), e.procs["detokd"].log.String()
	rankLogs := e.procs["schedulerd0"].log.String() + e.procs["schedulerd1"].log.String()
	e.mu.Unlock()
	var access map[string]any
	for _, line := range strings.Split(tokLog, "\n") {
		if strings.Contains(line, traceID) && json.Unmarshal([]byte(line), &access) == nil && access["msg"] == "request" {
			break
		}
		access = nil
	}
	if access == nil || access["endpoint"] != "/v1/completions" || access["status"] != 200.0 || access["completion_tokens"] != 5.0 ||
		access["rank"] == nil || access["ttft_seconds"] == nil || access["method"] != "POST" {
		t.Errorf("access line for %s: %v", traceID, access)
	}
	if !strings.Contains(rankLogs, "request_id="+traceID) || !strings.Contains(detLog, "request_id="+traceID) {
		t.Errorf("request id %s is missing from the rank's log (%v) or detokd's (%v)", traceID,
			strings.Contains(rankLogs, traceID), strings.Contains(detLog, traceID))
	}
}

// httpGetWith reads url's body with client c.
func httpGetWith(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}
