#!/usr/bin/env bash
# One prepared run on a GPU machine (H100/H200, CUDA 13, PyTorch; no Go, no network): builds the
# kernel fatbin, checks every kernel against its Go reference (the decode GEMMs and the Q8_0 / Q4_K
# kernels included), runs the CUDA backend end to end (fixtures, batch invariance, Q8_0 / Q4_K pico
# against the CPU backend, transformers on a random Qwen3-0.6B-shaped checkpoint made here) and
# benchmarks it (decode steps, and each decode GEMM against the copy-rate roofline). Each stage is
# time-boxed (the limits add up to 7.3 minutes), its log tee'd to $OUT/log.txt; the summary
# tables (stages, decode GEMMs, decode steps) come last and in $OUT/summary.md, results in
# $OUT/results.json. Commit $OUT/kernels.fatbin and $OUT/MANIFEST into backend/cuda/kernels/
# once the kernel stage passes.
#
# Prepare on a development machine: `make gpu-bins` (test binaries built with CGO_ENABLED=0
# into .dev/gpu). Then, from the repository root on the GPU machine:
#   scripts/gpu/check.sh [stage ...]      # stages: env build kernels e2e bench (default: all)
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/.dev/gpu/out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: > "$LOG"
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env build kernels e2e bench)
BIN=$ROOT/.dev/gpu
# the random checkpoint (1.2 GB) stays out of $OUT, which travels back
HFREF=${HFREF:-/tmp/llmserve-hfref}
declare -a ROWS=()
FAILED=0

log() { echo "$@" | tee -a "$LOG"; }

# stage NAME SECONDS CMD...: runs CMD under timeout, recording status and time.
stage() {
  local name=$1 limit=$2
  shift 2
  log "=== stage $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" bash -c "set -o pipefail; $*" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  local dt=$((SECONDS - t0))
  local status=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="timeout"; elif [ "$rc" -ne 0 ]; then status="FAIL ($rc)"; fi
  [ "$status" = ok ] || FAILED=1
  ROWS+=("| $name | $status | ${dt}s |")
  log "=== stage $name: $status in ${dt}s"
}

want() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

if want env; then
  stage env 30 '
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
    nvcc --version | tail -2
    command -v compute-sanitizer ncu || echo "no compute-sanitizer/ncu on PATH"
    python3 -c "import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"transformers\", transformers.__version__)"
    echo "libcublasLt:"; (ldconfig -p | grep -i cublasLt; find /usr/local /usr/lib /opt -maxdepth 7 -name "libcublasLt.so*" 2>/dev/null | head -5;
      python3 -c "import nvidia.cublas, os; print(\"wheel:\", os.path.dirname(nvidia.cublas.__file__))" 2>/dev/null) || true
    ls -la '"$BIN"'
    '"$BIN"'/cublaslt.test -test.v 2>&1 | grep -E "cuBLASLt|ok|FAIL" || true
  '
fi

if want build; then
  stage build 90 "
    make -C backend/cuda/kernels fatbin OUT='$OUT' &&
    grep -E 'registers|spill' '$OUT/ptxas.txt' | head -60 &&
    (cuobjdump --dump-sass '$OUT/kernels.fatbin' | grep -cE '^\s+/\*[0-9a-f]{4}\*/' || true)
  "
fi

export LLMSERVE_CUDA_FATBIN=$OUT/kernels.fatbin
export LLMSERVE_CUDA_GPU_ONLY=1 # the emulated halves of the end-to-end tests ran in CI
if want kernels; then
  stage kernels 85 "
    cd backend/cuda && ('$BIN/cu.test' -test.v -test.run . 2>&1 | tail -8) &&
    '$BIN/cuda.test' -test.v -test.run 'TestKernel(Elementwise|Gemm|DecodeGemm|Attention|Sampling)' &&
    if command -v compute-sanitizer >/dev/null; then
      LLMSERVE_CUDA_SMALL=1 timeout 40 compute-sanitizer --tool memcheck --error-exitcode 3 '$BIN/cuda.test' -test.run 'TestKernel(Elementwise|Gemm|DecodeGemm|Attention|Sampling)' 2>&1 | tail -15;
    else echo 'no compute-sanitizer: memcheck skipped'; fi
  "
fi

if want e2e; then
  stage e2e 100 "
    cd backend/cuda &&
    '$BIN/cuda.test' -test.v -test.run 'TestForward|TestBatchInvariance|TestAllLogits|TestDeviceSampling|TestLongContext|TestQuantized' &&
    python3 '$ROOT/scripts/gpu/hf_ref.py' --out '$HFREF' &&
    LLMSERVE_HF_REF='$HFREF' '$BIN/cuda.test' -test.v -test.run 'TestHFRandom'
  "
fi

if want bench; then
  stage bench 135 "
    python3 '$ROOT/scripts/gpu/hf_ref.py' --gemm-rate | tee '$OUT/gemm_rate.txt' &&
    cd backend/cuda &&
    LLMSERVE_BENCH_JSON='$OUT/bench.json' '$BIN/cuda.test' -test.run '^\$' -test.bench 'BenchmarkCopyBandwidth|BenchmarkDecode' -test.benchtime 20x
  "
fi

{
  echo "| stage | status | time |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} > "$OUT/summary.md"
python3 - "$OUT" <<'PY' || true
import json, os, sys
out = sys.argv[1]
# the decode GEMMs against the roofline, appended to the summary
bench = os.path.join(out, "bench.json")
if os.path.exists(bench):
    recs = [json.loads(l) for l in open(bench) if l.strip()]
    rows = [r for r in recs if r["name"].startswith("gemv/")]
    if rows:
        with open(os.path.join(out, "summary.md"), "a") as f:
            f.write("\n| decode GEMM | us | weights MB | roofline share |\n|---|---|---|---|\n")
            for r in rows:
                f.write("| %s | %.1f | %.1f | %.2f |\n" % (r["name"][5:], r["ms_per_step"] * 1e3, r["bytes_per_step"] / 1e6, r.get("roofline_share", 0)))
    steps = [r for r in recs if not r["name"].startswith("gemv/") and r["name"] != "copy"]
    if steps:
        with open(os.path.join(out, "summary.md"), "a") as f:
            f.write("\n| decode step | ms | tok/s | roofline share |\n|---|---|---|---|\n")
            for r in steps:
                f.write("| %s | %.3f | %.0f | %.2f |\n" % (r["name"], r["ms_per_step"], r["tok_per_s"], r.get("roofline_share", 0)))
res = {"summary": open(os.path.join(out, "summary.md")).read()}
for name in ("bench.json", "gemm_rate.txt", "MANIFEST"):
    p = os.path.join(out, name)
    if os.path.exists(p):
        res[name] = open(p).read()
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1)
PY
log ""
log "$(cat "$OUT/summary.md")"
exit $FAILED
