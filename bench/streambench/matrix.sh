#!/usr/bin/env bash
# Runs cells of the issue-5 streaming matrix (see cell.sh) and appends their JSON lines to $OUT.
# Each C gets its bare-SSE ceiling first, then the engine cells, so a ratio always compares runs
# taken minutes apart on the same machine. table.py turns $OUT into the Markdown table.
#
#   CS="64 512" bench/streambench/matrix.sh /tmp/bin5 >> /tmp/stream-matrix.jsonl
#
# Environment: CS ("64 512 2048 4096"), INTERVALS ("1 10"), WORKERS_LIST ("1 2"),
# DETOK_LIST ("0 1": 1 = --skip-detokenization), REQ_MULT (requests = max(REQ_MIN, REQ_MULT*C)),
# REQ_MIN (256), CEILING (1: also run baresse), plus cell.sh's variables.
set -euo pipefail
BIN=${1:?usage: matrix.sh BINDIR}
here=$(cd "$(dirname "$0")" && pwd)
CS=${CS:-"64 512 2048 4096"}
INTERVALS=${INTERVALS:-"1 10"}
WORKERS_LIST=${WORKERS_LIST:-"1 2"}
DETOK_LIST=${DETOK_LIST:-"0 1"}
REQ_MULT=${REQ_MULT:-1}
REQ_MIN=${REQ_MIN:-256}
CEILING=${CEILING:-1}
for c in $CS; do
	req=$((REQ_MULT * c))
	if [ "$req" -lt "$REQ_MIN" ]; then req=$REQ_MIN; fi
	if [ "$CEILING" = 1 ]; then
		TARGET=baresse C=$c REQUESTS=$req "$here/cell.sh" "$BIN"
	fi
	for k in $INTERVALS; do
		for sd in $DETOK_LIST; do
			for w in $WORKERS_LIST; do
				TARGET=engine C=$c REQUESTS=$req INTERVAL=$k SKIP_DETOK=$sd WORKERS=$w "$here/cell.sh" "$BIN"
			done
		done
	done
done
