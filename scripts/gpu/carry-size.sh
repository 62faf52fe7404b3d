#!/usr/bin/env bash
# Prints what a GPU run carries (the files git tracks or would add, plus .dev/gpu, which
# `make gpu-bins` fills) and fails above LIMIT_MIB (60: the device tool takes 64 MiB in all,
# and the margin absorbs files added before the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT_MIB=${LIMIT_MIB:-60}
# (a tracked file deleted in the working tree does not travel: stat skips it)
tree=$(git ls-files -z --cached --others --exclude-standard | { xargs -0 stat -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')
dev=0
[ -d .dev/gpu ] && dev=$(find .dev/gpu -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
total=$((tree + dev))
awk -v t="$tree" -v d="$dev" -v a="$total" -v l="$LIMIT_MIB" 'BEGIN {
  printf "carried to a GPU run: working tree %.1f MiB + .dev/gpu %.1f MiB = %.1f MiB (limit %d MiB)\n", t / 2^20, d / 2^20, a / 2^20, l
  exit (a > l * 2^20) ? 1 : 0 }'
