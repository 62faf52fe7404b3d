package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/llmserve/llmserve/tokenizer"
)

// workloadNames are the workloads' names in the table.
var workloadNames = map[string]string{
	"code": "code editing",
	"json": "JSON, long keys",
	"text": "free text",
}

// surveySchema is the structured workload's schema: many records whose long keys the grammar
// forces, with short model-chosen values (enums, booleans, short strings) between them, and more
// records than any run generates, so every run ends at its token budget.
const surveySchema = `{"type":"object","additionalProperties":false,"required":["quarterly_customer_satisfaction_survey_responses"],
"properties":{"quarterly_customer_satisfaction_survey_responses":{"type":"array","minItems":200,"maxItems":200,"items":{
"type":"object","additionalProperties":false,
"required":["respondent_membership_tier_description","would_recommend_service_to_colleagues","overall_satisfaction_rating_category","respondent_free_text_comment_summary"],
"properties":{
"respondent_membership_tier_description":{"enum":["platinum_premium_membership","standard_basic_membership"]},
"would_recommend_service_to_colleagues":{"type":"boolean"},
"overall_satisfaction_rating_category":{"enum":["very_satisfied","somewhat_dissatisfied"]},
"respondent_free_text_comment_summary":{"type":"string","maxLength":12}}}}}}`

// promptIDs is the workload's prompt in tok's ids. The code-editing prompt holds the Go file
// code, cut after a whole line so that the prompt stays within maxCode tokens.
func promptIDs(tok *tokenizer.Tokenizer, workload, code string, maxCode int) []int32 {
	switch workload {
	case "code":
		head := "Below is a Go source file of the llmserve repository.\n\n```go\n"
		foot := "```\n\nRewrite the file so that every comment is a complete sentence ending with a period, " +
			"and keep all of the code exactly as it is. Reply with the complete rewritten file only.\n\n```go\n"
		lines := strings.SplitAfter(code, "\n")
		// Drop lines from the end until the prompt fits (halving first, then line by line).
		for len(lines) > 1 {
			ids := tok.Encode(head+strings.Join(lines, "")+foot, true)
			if len(ids) <= maxCode {
				return ids
			}
			if len(ids) > 2*maxCode {
				lines = lines[:len(lines)/2]
			} else {
				lines = lines[:len(lines)-1]
			}
		}
		return tok.Encode(head+strings.Join(lines, "")+foot, true)
	case "json":
		return tok.Encode("Report this quarter's customer satisfaction survey as JSON: for every respondent, "+
			"the membership tier, whether they would recommend the service, the satisfaction category and a "+
			"short summary of their comment.\n\n", true)
	default:
		return tok.Encode("Write a long essay on the history of navigation at sea: the first rafts and "+
			"reed boats, Polynesian wayfinding by stars and swells, the compass, the astrolabe and the "+
			"sextant, the problem of longitude and the marine chronometer, radio beacons, radar, and "+
			"satellite positioning. Vary your wording and do not repeat yourself.\n\n", true)
	}
}

// stats is min and median of a cell's successful runs.
func stats(results []result, model, workload, engine string) (lo, med float64, n int, errText string) {
	var v []float64
	for _, r := range results {
		if r.model != model || r.workload != workload || r.engine != engine {
			continue
		}
		if r.err != nil {
			errText = strings.SplitN(r.err.Error(), "\n", 2)[0]
			continue
		}
		v = append(v, r.tokS)
	}
	if len(v) == 0 {
		return 0, 0, 0, errText
	}
	slices.Sort(v)
	med = v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[0], med, len(v), ""
}

// sameIDs compares the greedy ids of every off run with every ngram run of a cell: "yes", "n/a"
// (nothing to compare), or where the first pair differs.
func sameIDs(results []result, model, workload string) (string, bool) {
	var ref []int32
	var refEng string
	compared := false
	for _, r := range results {
		if r.model != model || r.workload != workload || r.err != nil || r.engine == "llama.cpp" {
			continue
		}
		if ref == nil {
			ref, refEng = r.ids, r.engine
			continue
		}
		if r.engine != refEng {
			compared = true
		}
		if !slices.Equal(ref, r.ids) {
			i := 0
			for i < min(len(ref), len(r.ids)) && ref[i] == r.ids[i] {
				i++
			}
			return fmt.Sprintf("**NO**: %s and %s differ at output token %d (of %d / %d)", refEng, r.engine, i, len(ref), len(r.ids)), false
		}
	}
	if !compared {
		return "n/a", true
	}
	return fmt.Sprintf("yes (%d tokens)", len(ref)), true
}

// report prints the markdown table and fails when greedy ids differ between off and ngram.
func report(out io.Writer, o options, results []result) error {
	fmt.Fprintf(out, "\nBatch 1, greedy, ignore EOS, up to %d new tokens, %d threads, %d rounds, engines alternating, each run a fresh process (ours: schedulerd + detokd + tokenizerd), flock %s held per %s.\n",
		o.newTokens, o.threads, o.rounds, o.lock, map[bool]string{false: "run", true: "round"}[o.lockRound])
	fmt.Fprintf(out, "tok/s: decode as a streaming client sees it, tokens after the first over first token to last (min / median); ratios of medians. Acceptance: draft tokens accepted / verified (ngram runs).\n")
	fmt.Fprintf(out, "Tokens per chunk (median): streamed at interval 1, a chunk carries one step's tokens unless the stream coalesced steps (off shows how often: 1.00 = never), so under ngram it is the tokens per forward pass.\n")
	fmt.Fprintf(out, "Lookup share: of the greedy output's tokens, those that prompt lookup (3- to 1-gram) would guess from the true context: how much the output repeats its prompt or itself.\n")
	fmt.Fprintf(out, "Free text runs with repetition_penalty %g (ours; llama.cpp plain), so that greedy output does not loop.\n", o.textPenalty)
	fmt.Fprintf(out, "CPU ms/token (median): what all of our engine's processes spent during the timed request (its prefill included) per generated token. Foreign load (max): the share of the machine's CPU time other processes or the hypervisor took during a run; a run over %.2f was run again (up to %d times; reruns: how many).\n\n", o.maxForeign, o.retries)
	fmt.Fprintln(out, "| workload | model | prompt tokens | lookup share | ours off | ours ngram | llama.cpp | ngram / off | ngram / llama.cpp | tokens per chunk ngram (off) | acceptance | greedy ids off = ngram | CPU ms/token ngram (off) | idle before runs (min) | foreign load (max) | reruns |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var bad []string
	for _, m := range o.models {
		for _, w := range o.workloads {
			cell := func(eng string) (string, float64) {
				if !slices.Contains(o.engines, eng) {
					return "not run", 0
				}
				lo, med, n, e := stats(results, m[0], w, eng)
				switch {
				case n == 0 && e == "":
					return "not run", 0
				case n == 0:
					return "failed: " + e, 0
				}
				return fmt.Sprintf("%.1f / %.1f", lo, med), med
			}
			off, offM := cell("off")
			ng, ngM := cell("ngram")
			ll, llM := cell("llama.cpp")
			ratio := func(a, b float64) string {
				if a == 0 || b == 0 {
					return "-"
				}
				return fmt.Sprintf("%.2fx", a/b)
			}
			acc := "-"
			var d, a float64
			have := false
			promptLen := 0
			idle, foreign, reruns := 1.0, 0.0, 0
			share := "-"
			for _, r := range results {
				if r.model == m[0] && r.workload == w {
					promptLen, idle, foreign = len(r.prompt), min(idle, r.idle), max(foreign, r.foreign)
					reruns += max(0, r.tries-1)
					if r.engine != "llama.cpp" && r.err == nil {
						share = fmt.Sprintf("%.2f", lookupShare(r.prompt, r.ids))
					}
					if r.engine == "ngram" && r.err == nil && r.haveSpec {
						d, a, have = d+r.drafted, a+r.accepted, true
					}
				}
			}
			switch {
			case have && d > 0:
				acc = fmt.Sprintf("%.0f%% (%.0f / %.0f)", 100*a/d, a, d)
			case have:
				acc = "no drafts"
			case slices.Contains(o.engines, "ngram"):
				acc = "n/a (no counters)"
			}
			median := func(eng string, f func(r *result) float64, format string) string {
				var v []float64
				for i := range results {
					if r := &results[i]; r.model == m[0] && r.workload == w && r.engine == eng && r.err == nil {
						v = append(v, f(r))
					}
				}
				if len(v) == 0 {
					return "-"
				}
				slices.Sort(v)
				return fmt.Sprintf(format, v[len(v)/2])
			}
			perChunk := func(eng string) string { return median(eng, func(r *result) float64 { return r.perChunk }, "%.2f") }
			cpuMs := func(eng string) string { return median(eng, func(r *result) float64 { return r.cpuMs }, "%.1f") }
			same, ok := sameIDs(results, m[0], w)
			if !ok {
				bad = append(bad, m[0]+" "+w)
			}
			if promptLen == 0 {
				continue // not run yet (the table so far)
			}
			fmt.Fprintf(out, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s (%s) | %.2f | %.2f | %d |\n", workloadNames[w], m[0], promptLen, share, off, ng, ll,
				ratio(ngM, offM), ratio(ngM, llM), perChunk("ngram"), perChunk("off"), acc, same, cpuMs("ngram"), cpuMs("off"), idle, foreign, reruns)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("greedy output ids differ with and without speculation: %s", strings.Join(bad, ", "))
	}
	return nil
}

// lookupShare is the share of out's tokens that prompt lookup, given the true context before
// each (prompt and the output so far), would have guessed: the token that followed the latest
// earlier occurrence of the context's last n tokens, for the largest n in [1, 3] that recurs.
// It is a property of the output alone, the same with and without speculation, and says how
// much a workload repeats itself (near 0: free text; near 1: a copy or a loop).
func lookupShare(prompt, out []int32) float64 {
	if len(out) == 0 {
		return 0
	}
	ctx := slices.Concat(prompt, out)
	hits := 0
	for i := len(prompt); i < len(ctx); i++ {
		if guess, ok := lookupGuess(ctx[:i]); ok && guess == ctx[i] {
			hits++
		}
	}
	return float64(hits) / float64(len(out))
}

// lookupGuess is the token after the latest earlier occurrence of toks' longest recurring
// suffix of 3 to 1 tokens.
func lookupGuess(toks []int32) (int32, bool) {
	for n := min(3, len(toks)-1); n >= 1; n-- {
		suffix := toks[len(toks)-n:]
		for s := len(toks) - n - 1; s >= 0; s-- {
			if slices.Equal(toks[s:s+n], suffix) {
				return toks[s+n], true
			}
		}
	}
	return 0, false
}
