#!/usr/bin/env python3
"""Writes OUT/summary.md and OUT/results.json from what scripts/gpu/check.sh has left in OUT so
far: stages.tsv (one line per finished stage), bench.json (one JSON line per benchmark record,
appended as each finishes), rates.json (torch's copy and bf16 GEMM rates), serve.json (the serve
stage's client checks and load-generator summary). check.sh runs it after every stage, so a run
cut short still leaves the results of the stages it finished.

The decode table marks the issue's targets where a row has one: batch 256 >= 70% and batch 64
>= 65% of the copy-bandwidth roofline (bf16, either graph mode), batch 1 with graphs <= 1.2 ms
per step for the Qwen3-0.6B shape and <= 7.2 ms for the 8B shapes.
"""
import json
import os
import re
import sys


def load_lines(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def target(name, ms, share):
    m = re.match(r"^([\w.-]+)/B=(\d+)/graphs=(\w+)(/batch-dependent)?$", name)
    if not m:
        return ""
    shape, batch, graphs = m.group(1), int(m.group(2)), m.group(3) == "true"
    if shape not in ("qwen3-0.6b", "llama-3.1-8b", "qwen3-8b"):
        return ""  # quantized weights: no target
    if batch == 256:
        return "met (>= 0.70)" if share >= 0.70 else "MISSED (>= 0.70)"
    if batch == 64:
        return "met (>= 0.65)" if share >= 0.65 else "MISSED (>= 0.65)"
    if batch == 1 and graphs:
        limit = 1.2 if shape == "qwen3-0.6b" else 7.2 if shape.endswith("8b") else None
        if limit is not None:
            return f"met (<= {limit} ms)" if ms <= limit else f"MISSED (<= {limit} ms)"
    return ""


def main():
    out = sys.argv[1]
    lines = ["| stage | status | time | notes |", "|---|---|---|---|"]
    tsv = os.path.join(out, "stages.tsv")
    stages = []
    if os.path.exists(tsv):
        for row in open(tsv):
            f = row.rstrip("\n").split("\t")
            if len(f) >= 3:
                stages.append({"stage": f[0], "status": f[1], "seconds": f[2], "notes": f[3] if len(f) > 3 else ""})
                lines.append(f"| {f[0]} | {f[1]} | {f[2]}s | {f[3] if len(f) > 3 else ''} |")
    res = {"stages": stages}
    rates = os.path.join(out, "rates.json")
    if os.path.exists(rates):
        try:
            res["rates"] = json.load(open(rates))
            r = res["rates"]
            lines += ["", f"torch on this GPU: bf16 GEMM {r.get('gemm_bf16_tflops', 0):.0f} TFLOP/s ({r.get('gemm_shape')}), "
                          f"device copy {r.get('copy_tb_s', 0):.2f} TB/s (read + write)"]
        except ValueError:
            pass
    recs = load_lines(os.path.join(out, "bench.json"))
    res["bench"] = recs
    copy = [r for r in recs if r.get("name") == "copy"]
    if copy:
        lines += ["", f"copy bandwidth (device to device, 1 GiB x 4, read + write counted): {copy[-1]['copy_bytes_per_s'] / 1e12:.2f} TB/s"]
    steps = [r for r in recs if r.get("name") != "copy" and not r.get("name", "").startswith("gemv/")]
    if steps:
        lines += ["", "| decode step (ctx 1024) | ms | tok/s | roofline share | target |", "|---|---|---|---|---|"]
        for r in steps:
            t = target(r["name"], r["ms_per_step"], r.get("roofline_share", 0))
            lines.append(f"| {r['name']} | {r['ms_per_step']:.3f} | {r['tok_per_s']:.0f} | {r.get('roofline_share', 0):.2f} | {t} |")
    gemv = [r for r in recs if r.get("name", "").startswith("gemv/")]
    if gemv:
        lines += ["", "| decode GEMM | us | weights MB | roofline share |", "|---|---|---|---|"]
        for r in gemv:
            lines.append(f"| {r['name'][5:]} | {r['ms_per_step'] * 1e3:.1f} | {r['bytes_per_step'] / 1e6:.1f} | {r.get('roofline_share', 0):.2f} |")
    serve = os.path.join(out, "serve.json")
    if os.path.exists(serve):
        for s in load_lines(serve):
            res.setdefault("serve", []).append(s)
            if "checks" in s:
                lines += ["", "| serve check (pico, --device cuda) | result |", "|---|---|"]
                for name, c in s["checks"].items():
                    lines.append(f"| {name} | {'ok' if c['ok'] else 'FAIL'}: {c['detail'][:160]} |")
            elif "summary" in s:
                g = s["summary"]
                drain = g.get("drain") or {}
                lines += ["", f"load generator: {g.get('concurrency')} concurrent streams, {g.get('completed')} of "
                              f"{g.get('requests')} requests completed, {g.get('failed')} failed, {g.get('violations')} accounting "
                              f"violations, {g.get('output_tokens')} tokens at {g.get('output_tok_per_s', 0):.0f} tok/s, "
                              f"TTFT p50 {(g.get('ttft') or {}).get('p50_ms', 0):.0f} ms, ITL p50 {(g.get('itl') or {}).get('p50_ms', 0):.1f} ms, "
                              f"drained {drain.get('drained')}"]
    man = os.path.join(out, "MANIFEST")
    if os.path.exists(man):
        res["MANIFEST"] = open(man).read()
    text = "\n".join(lines) + "\n"
    res["summary"] = text
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
