#!/usr/bin/env bash
# gen.sh regenerates quant/testdata from llama.cpp's prebuilt ggml (npm node-llama-cpp 3.22.1, as
# ../shared/peers/llamacpp installs it). Usage: gen.sh NODE_MODULES_DIR
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB=${1:?node_modules dir with @node-llama-cpp/linux-x64}/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
BIN=$(mktemp -d)/genfixtures
gcc -O2 -o "$BIN" "$HERE/genfixtures.c" -ldl -lm
"$BIN" "$LIB" "$HERE/.."
