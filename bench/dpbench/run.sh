#!/usr/bin/env bash
# Runs the data-parallel benchmark matrix on this host and prints a Markdown table: for each
# R in $RANKS, method in $METHODS and concurrency in $CONCURRENCY it starts an engine from the
# built binaries (R schedulerd ranks with the token-replay BENCHMARK backend and a fixed step
# time, detokd, tokenizerd with $WORKERS workers), runs dpbench (loadgen + /get_load sampling)
# against it, and stops it.
#
#   go build -o /tmp/bin/ ./cmd/... ./bench/loadgen ./bench/dpbench
#   bench/dpbench/run.sh /tmp/bin > table.md
#
# Environment: RANKS ("1 2 4"), METHODS ("round_robin shortest_queue minimum_tokens"),
# CONCURRENCY ("256 1024"), WORKERS (2), STEP (20ms), INPUT_LEN (128), OUTPUT_LEN (64),
# REQUESTS_PER_C (2: requests = 2 x concurrency), PORT (33100), MODEL_PATH (models/pico),
# OUT (raw JSON lines; default a temp file).
set -euo pipefail
BIN=${1:?usage: run.sh BINDIR}
RANKS=${RANKS:-"1 2 4"}
METHODS=${METHODS:-"round_robin shortest_queue minimum_tokens"}
CONCURRENCY=${CONCURRENCY:-"256 1024"}
WORKERS=${WORKERS:-2}
STEP=${STEP:-20ms}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-64}
REQUESTS_PER_C=${REQUESTS_PER_C:-2}
PORT=${PORT:-33100}
MODEL_PATH=${MODEL_PATH:-$(cd "$(dirname "$0")/../.." && pwd)/models/pico}
OUT=${OUT:-$(mktemp /tmp/dpbench-XXXXXX.jsonl)}

pids=()
stop_engine() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_engine EXIT

start_engine() { # R METHOD RUNDIR LOGDIR
	local r=$1 method=$2 run=$3 logs=$4
	local common=(--model-path "$MODEL_PATH" --run-dir "$run" --port "$PORT" --tokenizer-worker-num "$WORKERS" --dp-size "$r")
	for ((k = 0; k < r; k++)); do
		"$BIN/schedulerd" serve "${common[@]}" --dp-rank "$k" --load-format replay --replay-step-time "$STEP" >"$logs/schedulerd$k.log" 2>&1 &
		pids+=($!)
	done
	"$BIN/detokd" "${common[@]}" >"$logs/detokd.log" 2>&1 &
	pids+=($!)
	"$BIN/tokenizerd" serve "${common[@]}" --load-balance-method "$method" >"$logs/tokenizerd.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "engine R=$r $method not healthy; logs in $logs" >&2
	return 1
}

: >"$OUT"
for r in $RANKS; do
	for method in $METHODS; do
		[[ $r == 1 && $method != round_robin ]] && continue # one rank: every method is the same
		tmp=$(mktemp -d /tmp/dpbench-run-XXXXXX)
		mkdir -m 700 "$tmp/run"
		start_engine "$r" "$method" "$tmp/run" "$tmp"
		for c in $CONCURRENCY; do
			"$BIN/dpbench" -url "http://127.0.0.1:$PORT" -loadgen "$BIN/loadgen" -label "R=$r" -min-total $((c / 2)) -- \
				-concurrency "$c" -requests $((REQUESTS_PER_C * c)) -input-len "$INPUT_LEN" -output-len "$OUTPUT_LEN" >>"$OUT" ||
				echo "dpbench R=$r $method C=$c failed (logs in $tmp)" >&2
		done
		stop_engine
		rm -rf "$tmp"
	done
done

echo "| R | method | C | requests ok/failed | output tok/s | TTFT p50 ms | TTFT p99 ms | max/mean steady: mean | p99 | max | max/mean whole run: mean | max |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
python3 - "$OUT" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line); im = d["imbalance"]; st = d["steady"]
    m = d["method"] if d["ranks"] > 1 else "(any)"
    print(f'| {d["ranks"]} | {m} | {d["concurrency"]} | {d["completed"]}/{d["failed"]} | {d["output_tok_per_s"]:.0f} | '
          f'{d["ttft_p50_ms"]:.0f} | {d["ttft_p99_ms"]:.0f} | {st["mean"]:.3f} | {st["p99"]:.3f} | {st["max"]:.3f} | {im["mean"]:.3f} | {im["max"]:.3f} |')
PY
echo "raw results: $OUT" >&2
