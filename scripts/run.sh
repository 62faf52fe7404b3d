#!/usr/bin/env bash
# Starts the engine on one host: one schedulerd per DP rank, detokd (unless SKIP_DETOKENIZATION or
# SKIP_TOKENIZER_INIT), and tokenizerd with its workers, run by bin/procfile, which restarts any
# process that exits (with backoff) and has no control port. Settings come from the environment,
# with the defaults below; every binary also reads them itself. MODEL (make run MODEL=DIR_OR_GGUF)
# is MODEL_PATH's short name. A process that refuses to start (exit status 78: a configuration
# error such as a bad model path, device or flag value, or a port in use) stops the engine, and
# this script exits 78 after the runner's line saying which process and why.
set -euo pipefail
cd "$(dirname "$0")/.."
export LLMSERVE_BIN=${LLMSERVE_BIN:-./bin}
export MODEL_PATH=${MODEL_PATH:-${MODEL:-models/pico}}
export HOST=${HOST:-127.0.0.1}
export PORT=${PORT:-30000}
export LLMSERVE_PORT=$PORT
export TOKENIZER_WORKERS=${TOKENIZER_WORKERS:-1}
export DEVICE=${DEVICE:-cpu}
export DP_SIZE=${DP_SIZE:-1}
export SKIP_DETOKENIZATION=${SKIP_DETOKENIZATION:-false}
export SKIP_TOKENIZER_INIT=${SKIP_TOKENIZER_INIT:-false}
export LLMSERVE_RUN_DIR=${LLMSERVE_RUN_DIR:-${XDG_RUNTIME_DIR:-/tmp}/llmserve-$(id -u)-$PORT}
mkdir -p "$LLMSERVE_RUN_DIR" && chmod 700 "$LLMSERVE_RUN_DIR"
# One engine per run dir: the lock is held (fd 9, inherited) for as long as any of its processes
# lives, and taken before the Procfile of a live engine could be replaced.
exec 9>>"$LLMSERVE_RUN_DIR/run.lock"
if ! flock -n 9; then
  echo "run: $LLMSERVE_RUN_DIR is in use by another engine (make run with PORT=$PORT?); stop it, or set PORT or LLMSERVE_RUN_DIR" >&2
  exit 78
fi
procfile="$LLMSERVE_RUN_DIR/Procfile"
: >"$procfile"
for ((r = 0; r < DP_SIZE; r++)); do
  echo "schedulerd$r: DP_RANK=$r exec \$LLMSERVE_BIN/schedulerd serve --dp-rank $r" >>"$procfile"
done
if [ "$SKIP_DETOKENIZATION" != true ] && [ "$SKIP_TOKENIZER_INIT" != true ]; then
  grep '^detokd:' Procfile >>"$procfile"
fi
grep '^tokenizerd:' Procfile >>"$procfile"
msg="run: $procfile (run dir $LLMSERVE_RUN_DIR), serving $MODEL_PATH on http://$HOST:$PORT"
if [ "${LOG_FORMAT:-text}" = json ]; then
  # One stream of JSON lines: the runner passes the processes' through and writes its own as JSON.
  printf '{"time":"%s","level":"INFO","msg":"%s","proc":"run"}\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "${msg//\"/\\\"}"
else
  echo "$msg"
fi
exec "$LLMSERVE_BIN/procfile" "$procfile"
