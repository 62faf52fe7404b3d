#!/usr/bin/env bash
# Starts the engine on one host with goreman: one schedulerd per DP rank, detokd (unless
# SKIP_DETOKENIZATION or SKIP_TOKENIZER_INIT), and tokenizerd with its workers. Settings come
# from the environment, with the defaults below; every binary also reads them itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export MODEL_PATH=${MODEL_PATH:-models/pico}
export HOST=${HOST:-127.0.0.1}
export PORT=${PORT:-30000}
# goreman gives every process its own PORT; the engine reads LLMSERVE_PORT first.
export LLMSERVE_PORT=$PORT
export TOKENIZER_WORKERS=${TOKENIZER_WORKERS:-1}
export DEVICE=${DEVICE:-cpu}
export DP_SIZE=${DP_SIZE:-1}
export SKIP_DETOKENIZATION=${SKIP_DETOKENIZATION:-false}
export SKIP_TOKENIZER_INIT=${SKIP_TOKENIZER_INIT:-false}
export LLMSERVE_RUN_DIR=${LLMSERVE_RUN_DIR:-${XDG_RUNTIME_DIR:-/tmp}/llmserve-$(id -u)-$PORT}
mkdir -p "$LLMSERVE_RUN_DIR" && chmod 700 "$LLMSERVE_RUN_DIR"
procfile="$LLMSERVE_RUN_DIR/Procfile"
: >"$procfile"
for ((r = 0; r < DP_SIZE; r++)); do
  echo "schedulerd$r: DP_RANK=$r exec ./bin/schedulerd serve --dp-rank $r" >>"$procfile"
done
if [ "$SKIP_DETOKENIZATION" != true ] && [ "$SKIP_TOKENIZER_INIT" != true ]; then
  grep '^detokd:' Procfile >>"$procfile"
fi
grep '^tokenizerd:' Procfile >>"$procfile"
echo "run: $procfile (run dir $LLMSERVE_RUN_DIR), serving $MODEL_PATH on http://$HOST:$PORT"
exec go tool goreman -f "$procfile" -b 0 start
