#!/usr/bin/env bash
# Runs dpbench's multi-turn shared-prefix trace against DP=$RANKS replay ranks for round_robin,
# cache_aware and the sticky oracle (round_robin engine, every conversation pinned to rank
# c mod R), and prints a Markdown table. Timed: run it under `flock /tmp/perf.lock`.
#
#   go build -o /tmp/bin/ ./cmd/... ./bench/dpbench
#   flock /tmp/perf.lock bench/dpbench/multiturn.sh /tmp/bin
#
# Environment: RANKS (4), WORKERS (2), STEP (20ms), TOKEN_TIME (20us: a step's time grows with
# the tokens it computes, so prefix-cache hits shorten prefills as on a device), PORT (33200), MODEL_PATH (models/pico),
# TRACE (dpbench flags; default 32 conversations x 8 turns, 4 system prompts of 512 tokens,
# 64-token user turns, 64-token replies), OUT (raw JSON lines; default a temp file).
set -euo pipefail
BIN=${1:?usage: multiturn.sh BINDIR}
RANKS=${RANKS:-4}
WORKERS=${WORKERS:-2}
STEP=${STEP:-20ms}
TOKEN_TIME=${TOKEN_TIME:-20us}
PORT=${PORT:-33200}
TRACE=${TRACE:-"-conversations 32 -turns 8 -groups 4 -system-len 512 -user-len 64 -output-len 64"}
MODEL_PATH=${MODEL_PATH:-$(cd "$(dirname "$0")/../.." && pwd)/models/pico}
OUT=${OUT:-$(mktemp /tmp/dpbench-mt-XXXXXX.jsonl)}

pids=()
stop_engine() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_engine EXIT

start_engine() { # METHOD RUNDIR LOGDIR
	local method=$1 run=$2 logs=$3
	local common=(--model-path "$MODEL_PATH" --run-dir "$run" --port "$PORT" --tokenizer-worker-num "$WORKERS" --dp-size "$RANKS")
	for ((k = 0; k < RANKS; k++)); do
		"$BIN/schedulerd" serve "${common[@]}" --dp-rank "$k" --load-format replay --replay-step-time "$STEP" --replay-token-time "$TOKEN_TIME" >"$logs/schedulerd$k.log" 2>&1 &
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
	echo "engine $method not healthy; logs in $logs" >&2
	return 1
}

: >"$OUT"
for run in round_robin cache_aware oracle; do
	method=$run extra=()
	[[ $run == oracle ]] && method=round_robin extra=(-oracle)
	tmp=$(mktemp -d /tmp/dpbench-mt-run-XXXXXX)
	mkdir -m 700 "$tmp/run"
	start_engine "$method" "$tmp/run" "$tmp"
	# shellcheck disable=SC2086
	"$BIN/dpbench" -url "http://127.0.0.1:$PORT" -label "$run" -multiturn $TRACE "${extra[@]}" >>"$OUT" ||
		echo "dpbench $run failed (logs in $tmp)" >&2
	stop_engine
	rm -rf "$tmp"
done

echo "| dispatch | requests ok/failed | prompt tokens | prefix-hit tokens | vs oracle | TTFT p50 ms | TTFT p99 ms | max/min running (worst sample) | samples |"
echo "|---|---|---|---|---|---|---|---|---|"
python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
oracle = next((r["prefix_hit_tokens"] for r in rows if r["oracle"]), 0)
for d in rows:
    name = "sticky oracle" if d["oracle"] else d["method"]
    vs = f'{100 * d["prefix_hit_tokens"] / oracle:.1f}%' if oracle else "-"
    mm = "inf" if d["max_min_running"] < 0 else f'{d["max_min_running"]:.2f}'
    print(f'| {name} | {d["requests"] - d["failed"]}/{d["failed"]} | {d["prompt_tokens"]} | {d["prefix_hit_tokens"]} | {vs} | '
          f'{d["ttft_p50_ms"]:.0f} | {d["ttft_p99_ms"]:.0f} | {mm} | {d["samples"]} |')
PY
echo "raw results: $OUT" >&2
