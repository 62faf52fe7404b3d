#!/usr/bin/env python3
"""Turns matrix.sh's JSON lines (stdin or files) into the issue-5 Markdown table: per cell the
output tok/s, req/s, TTFT p50/p99, ITL p50, ids per chunk, the ratio to the bare-SSE ceiling at
the same concurrency (the latest ceiling line before the cell), and the accounting violations."""
import fileinput
import json

ceiling = {}


def variant(r):
    """The cell's departures from the defaults (extra schedulerd flags, tokenizerd GOMAXPROCS)."""
    parts = []
    if r.get("sched_extra"):
        parts.append(r["sched_extra"])
    if r.get("tok_gomaxprocs"):
        parts.append("tokenizerd GOMAXPROCS=" + r["tok_gomaxprocs"])
    return ", ".join(parts)


print("| target | C | interval | detokd | workers | tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ids/chunk | / ceiling | violations | drained | variant |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for line in fileinput.input():
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    s = r["summary"]
    if s is None:
        print(f"| {r['target']} | {r['c']} | {r['interval']} | | {r['workers']} | failed (rc {r['rc']}, logs {r['logs']}) ||||||||||")
        continue
    tps = s["output_tok_per_s"]
    if r["target"] == "baresse":
        ceiling[r["c"]] = tps
        ratio, detok, workers, interval = "1", "-", "-", "1"
    else:
        ratio = f"{tps / ceiling[r['c']]:.2f}" if r["c"] in ceiling else "?"
        detok = "no" if r["skip_detok"] else "yes"
        workers, interval = r["workers"], r["interval"]
    drain = s.get("drain")
    drained = "-" if drain is None else ("yes" if drain.get("drained") else "NO")
    print(f"| {r['target']} | {r['c']} | {interval} | {detok} | {workers} | {tps:,.0f} | {s['requests_per_s']:.1f} | "
          f"{s['ttft']['p50_ms']:.1f} | {s['ttft']['p99_ms']:.1f} | {s['itl']['p50_ms']:.2f} | {s['ids_per_chunk']:.2f} | "
          f"{ratio} | {s['violations']} | {drained} | {variant(r)} |")
