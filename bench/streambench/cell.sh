#!/usr/bin/env bash
# Runs one cell of the issue-5 streaming matrix on this host and prints loadgen's one-line JSON
# summary, prefixed by the cell's settings: it starts the engine from built binaries (schedulerd
# with the token-replay BENCHMARK backend at step time 0, detokd unless SKIP_DETOK=1, tokenizerd
# with $WORKERS workers) or, with TARGET=baresse, the bare SSE server, runs loadgen against it with
# ignore_eos, and stops what it started (by pid).
#
#   go build -o /tmp/bin5/ ./cmd/... ./bench/loadgen ./bench/baresse
#   C=512 INTERVAL=1 WORKERS=1 bench/streambench/cell.sh /tmp/bin5
#
# Environment: TARGET (engine | baresse), C (512), REQUESTS (2*C), INTERVAL (1), WORKERS (1),
# SKIP_DETOK (0), INPUT_LEN (16), OUTPUT_LEN (256), RAMP (0s), DISCONNECT (0),
# PORT (20500: outside Linux's ephemeral range 32768-60999, where a later cell's listen can
# collide with the client ports left in TIME_WAIT by 4,096 connections),
# PROFILE (seconds of `perf record -a -g` taken 5 s into the run, written to $PROFILE_OUT),
# EXTRA (more loadgen flags), SCHED_EXTRA (more schedulerd flags, e.g. --max-prefill-tokens),
# TOK_GOMAXPROCS (GOMAXPROCS of every tokenizerd process; empty = Go's default).
set -euo pipefail
BIN=${1:?usage: cell.sh BINDIR}
TARGET=${TARGET:-engine}
C=${C:-512}
REQUESTS=${REQUESTS:-$((2 * C))}
INTERVAL=${INTERVAL:-1}
WORKERS=${WORKERS:-1}
SKIP_DETOK=${SKIP_DETOK:-0}
INPUT_LEN=${INPUT_LEN:-16}
OUTPUT_LEN=${OUTPUT_LEN:-256}
RAMP=${RAMP:-0s}
PORT=${PORT:-20500}
DISCONNECT=${DISCONNECT:-0}
PROFILE=${PROFILE:-0}
PROFILE_OUT=${PROFILE_OUT:-/tmp/streambench-perf.data}
EXTRA=${EXTRA:-}
SCHED_EXTRA=${SCHED_EXTRA:-}
TOK_GOMAXPROCS=${TOK_GOMAXPROCS:-}
MODEL_PATH=${MODEL_PATH:-$(cd "$(dirname "$0")/../.." && pwd)/models/pico}
LOGS=${LOGS:-$(mktemp -d /tmp/streambench-logs-XXXXXX)}

pids=()
stop_all() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap stop_all EXIT

if [ "$TARGET" = baresse ]; then
	"$BIN/baresse" -addr "127.0.0.1:$PORT" -vocab 8192 >"$LOGS/baresse.log" 2>&1 &
	pids+=($!)
else
	run=$(mktemp -d /tmp/streambench-run-XXXXXX)
	chmod 700 "$run"
	common=(--run-dir "$run" --port "$PORT" --tokenizer-worker-num "$WORKERS" --model-path "$MODEL_PATH")
	if [ "$SKIP_DETOK" = 1 ]; then common+=(--skip-detokenization); fi
	# shellcheck disable=SC2086
	"$BIN/schedulerd" serve "${common[@]}" --load-format replay --replay-step-time 0 \
		--max-running-requests "$C" $SCHED_EXTRA >"$LOGS/sched.log" 2>&1 &
	pids+=($!)
	if [ "$SKIP_DETOK" != 1 ]; then
		"$BIN/detokd" "${common[@]}" >"$LOGS/detok.log" 2>&1 &
		pids+=($!)
	fi
	tokenv=()
	if [ -n "$TOK_GOMAXPROCS" ]; then tokenv=(GOMAXPROCS="$TOK_GOMAXPROCS"); fi
	env "${tokenv[@]}" "$BIN/tokenizerd" serve "${common[@]}" --stream-interval "$INTERVAL" >"$LOGS/tok.log" 2>&1 &
	pids+=($!)
fi
# Ready once every worker answers: /health (a rank has reported) several times in a row, since
# SO_REUSEPORT spreads the probes over the workers.
probe=/health
if [ "$TARGET" = baresse ]; then probe=/v1/models; fi
ok=0
for _ in $(seq 1 300); do
	if curl -sf "127.0.0.1:$PORT$probe" >/dev/null 2>&1; then ok=$((ok + 1)); else ok=0; fi
	if [ "$ok" -ge 8 ]; then break; fi
	sleep 0.05
done

if [ "$PROFILE" != 0 ]; then
	(sleep 5 && perf record -a -g -o "$PROFILE_OUT" -- sleep "$PROFILE" >/dev/null 2>&1) &
	perfpid=$!
fi
drain=()
if [ "$TARGET" = engine ]; then drain=(-check-drained -drain-timeout 30s); fi
# The machine's CPU ticks (/proc/stat: busy, idle) and the server tree's and this shell's reaped
# children's (loadgen's, once waited for) around the run: what else ran meanwhile (another
# build or benchmark on a shared machine) shows as other_cpu_s (with the kernel's softirq work
# for the loopback traffic, a few % of the machine), and a cell with much more measured a
# contended machine; idle_pct is the share of the CPU nobody used.
tree() {
	echo "$1"
	for k in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree "$k"; done
}
server_ticks() {
	local n=0
	for p in "${pids[@]}"; do
		for q in $(tree "$p"); do n=$((n + $(awk '{print $14 + $15}' "/proc/$q/stat" 2>/dev/null || echo 0))); done
	done
	echo "$n"
}
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }
# times runs in this shell (in $(...) it would report a subshell's children, none): its second
# line is the user and system time of the children this shell has waited for.
children_s() { tail -n 1 "$1" | awk '{gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4}'; }
read -r busy0 idle0 < <(machine)
srv0=$(server_ticks)
times >"$LOGS/times.before"
set +e
# shellcheck disable=SC2086
"$BIN/loadgen" -url "http://127.0.0.1:$PORT" -concurrency "$C" -requests "$REQUESTS" \
	-input-len "$INPUT_LEN" -output-len "$OUTPUT_LEN" -ramp "$RAMP" -disconnect-frac "$DISCONNECT" \
	-progress 0 -json "${drain[@]}" $EXTRA >"$LOGS/loadgen.out" 2>"$LOGS/loadgen.err"
rc=$?
set -e
read -r busy1 idle1 < <(machine)
srv1=$(server_ticks)
times >"$LOGS/times.after"
kids0=$(children_s "$LOGS/times.before")
kids1=$(children_s "$LOGS/times.after")
if [ "$PROFILE" != 0 ]; then wait "$perfpid" || true; fi
# CPU seconds (user + system, all threads) the server processes and their children used from start to here: on a
# machine shared with other work, CPU per token says more than tok/s.
# Every descendant counts: tokenizerd's workers are child processes of its supervisor, and a
# process's own stat holds only its own time (children count there only once reaped).
ticks=0
byproc="" # "name":{cpu_s, syscr, syscw} per process (a worker is named tokenizerd/N by its index in the tree)
hz=$(getconf CLK_TCK)
for p in "${pids[@]}"; do
	n=0
	for q in $(tree "$p"); do
		t=$(awk '{print $14 + $15}' "/proc/$q/stat" 2>/dev/null || echo 0)
		name=$(cat "/proc/$q/comm" 2>/dev/null || echo gone)
		if [ "$n" -gt 0 ]; then name="$name/$n"; fi
		n=$((n + 1))
		# read and write system calls beside the CPU seconds (a write per SSE chunk, a read per
		# ZMQ wake-up or request).
		sysc=$(awk '/^syscr/ {r = $2} /^syscw/ {w = $2} END {printf "%d,%d", r, w}' "/proc/$q/io" 2>/dev/null || echo 0,0)
		byproc="$byproc${byproc:+,}$(awk -v n="$name" -v t="$t" -v hz="$hz" -v sc="$sysc" 'BEGIN {split(sc, c, ","); printf "\"%s\":{\"cpu_s\":%.2f,\"syscr\":%d,\"syscw\":%d}", n, t / hz, c[1], c[2]}')"
		ticks=$((ticks + t))
	done
done
server_cpu=$(awk -v t="$ticks" -v hz="$hz" 'BEGIN {printf "%.2f", t / hz}')
machine_json=$(awk -v b="$((busy1 - busy0))" -v i="$((idle1 - idle0))" -v s="$((srv1 - srv0))" -v k0="$kids0" -v k1="$kids1" -v hz="$hz" \
	'BEGIN {printf "\"loadgen_cpu_s\":%.2f,\"other_cpu_s\":%.2f,\"idle_pct\":%.1f", k1 - k0, b / hz - s / hz - (k1 - k0), 100 * i / (b + i)}')
printf '{"target":"%s","c":%d,"interval":%d,"workers":%d,"skip_detok":%d,"sched_extra":"%s","tok_gomaxprocs":"%s","rc":%d,"server_cpu_s":%s,"server_cpu_by":{%s},%s,"logs":"%s","summary":%s}\n' \
	"$TARGET" "$C" "$INTERVAL" "$WORKERS" "$SKIP_DETOK" "$SCHED_EXTRA" "$TOK_GOMAXPROCS" "$rc" "$server_cpu" "$byproc" "$machine_json" "$LOGS" "$(tail -n 1 "$LOGS/loadgen.out" | grep '^{' || echo null)"
