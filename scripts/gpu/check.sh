#!/usr/bin/env bash
# shellcheck disable=SC2317 # the stage functions run by name, through timeout bash -c
# One prepared run on a GPU machine (H100/H200, CUDA 13, PyTorch + transformers; no Go, no
# network) for issue 28: builds the kernel fatbin, checks every kernel against its Go reference,
# runs the CUDA backend end to end (fixtures, conformance and batch invariance, quantized pico,
# transformers float32 on a random Qwen3-0.6B-shaped checkpoint made here), benchmarks it, serves
# pico with `--device cuda` as `make run DEVICE=cuda` does (streams, structured output, tools,
# then the streaming load generator at 2,048 concurrent streams with exact accounting), and runs
# compute-sanitizer memcheck on small sizes.
#
# Prepare on a development machine: `make gpu-bins` (test and engine binaries built with
# CGO_ENABLED=0, stripped, in .dev/gpu/bins.tar.xz), then carry .dev/gpu with the working tree
# and, from the repository root on the GPU machine:
#   OUT=DIR scripts/gpu/check.sh [stage ...]   # stages: env build kernels e2e bench serve memcheck ncu
# (default: all, in that order: the most valuable results first). Results go to $OUT
# (default .dev/gpu-out): log.txt, one NAME.log per stage, summary.md and results.json rewritten
# after every stage (so a run cut short keeps what finished), kernels.fatbin, MANIFEST and
# ptxas.txt from the build, bench.json, rates.json, serve.json. Commit kernels.fatbin and
# MANIFEST into backend/cuda/kernels/ once the kernel stage passes.
#
# Time: the stage limits below add up to 455 s, but the whole script stops starting work after
# CHECK_BUDGET seconds (340), so one run fits the 6 minutes a GPU session plans for it, leaving
# room for a rerun within 15 minutes of device time (on an H200, 2026-11-26: every stage but the
# benchmarks took under 40 s; the benchmarks take what is left). The random checkpoint for the e2e stage is
# made in the background from the start, while the fatbin builds.
#
# Without a GPU (no working nvidia-smi) the script dry-runs: every stage takes its no-GPU path
# (GPU tests skip saying why; the serve stage runs the engine on the emulated device at a small
# load), so the script, binaries and summary can be checked anywhere. With a GPU, a GPU test
# that cannot open the device fails instead of skipping (LLMSERVE_CUDA_REQUIRE_GPU=1).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/.dev/gpu-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/log.txt
: >"$LOG"
: >"$OUT/stages.tsv"
# an earlier run's results in the same folder would read as this run's
rm -f "$OUT"/{bench.json,rates.json,serve.json,loadgen.out,hf_ref.log,hf_ref.rc,summary.md,results.json} "$OUT"/*.note
BUDGET=${CHECK_BUDGET:-340}
STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(env build kernels e2e bench serve memcheck ncu)
CARRY=$ROOT/.dev/gpu
BIN=${LLMSERVE_GPU_BIN:-${TMPDIR:-/tmp}/llmserve-gpu-bin}
# the random checkpoint (1.2 GB) stays out of $OUT, which travels back
HFREF=${HFREF:-${TMPDIR:-/tmp}/llmserve-hfref}
FAILED=0

log() { echo "$@" | tee -a "$LOG"; }
summary() { python3 "$ROOT/scripts/gpu/summary.py" "$OUT" 2>>"$LOG" || true; }

# stage NAME SECONDS FUNCTION: runs FUNCTION (exported, in a child bash) under timeout, capped
# to what is left of the budget, logging to $OUT/NAME.log and $LOG; records status, time and the
# test counts of its log in stages.tsv, then rewrites the summary.
stage() {
  local name=$1 limit=$2 fn=$3
  local left=$((BUDGET - SECONDS - 2))
  if [ "$left" -lt 10 ]; then
    log "=== stage $name: not run (${left}s of the ${BUDGET}s budget left)"
    printf '%s\tnot run (budget)\t0\t\n' "$name" >>"$OUT/stages.tsv"
    FAILED=1
    summary
    return
  fi
  limit=$((limit * SLOW))
  [ "$limit" -gt "$left" ] && limit=$left
  log "=== stage $name (limit ${limit}s, at ${SECONDS}s)"
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" bash -c "$fn" 2>&1 | tee "$OUT/$name.log" >>"$LOG"
  local rc=${PIPESTATUS[0]}
  local dt=$((SECONDS - t0)) status=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout; elif [ "$rc" -ne 0 ]; then status="FAIL ($rc)"; fi
  [ "$status" = ok ] || FAILED=1
  local pass fail skip notes
  pass=$(grep -cE -- '--- PASS' "$OUT/$name.log")
  fail=$(grep -cE -- '--- FAIL' "$OUT/$name.log")
  skip=$(grep -cE -- '--- SKIP' "$OUT/$name.log")
  notes=""
  [ "$((pass + fail + skip))" -gt 0 ] && notes="tests: $pass pass, $fail fail, $skip skip"
  if [ "$fail" -gt 0 ]; then
    notes="$notes (first failures: $(grep -oE -- '--- FAIL: [^ ]+' "$OUT/$name.log" | cut -d' ' -f3 | head -4 | tr '\n' ' '))"
  fi
  [ "$HAVE_GPU" = 1 ] || notes="${notes:+$notes }(no GPU: dry run)"
  if [ -s "$OUT/$name.note" ]; then notes="$notes; $(tr '\n' ' ' <"$OUT/$name.note")"; fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$dt" "$notes" >>"$OUT/stages.tsv"
  log "=== stage $name: $status in ${dt}s${notes:+: $notes}"
  summary
}

want() { local s; for s in "${STAGES[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

# par NAME PATTERN...: one test process per pattern, run at once (each its own CUDA context;
# the Go references then use the host's cores side by side), logs printed in order; fails if
# any failed.
par() {
  local name=$1
  shift
  local i=0 pids=() p rc=0
  for p in "$@"; do
    "$BIN/cuda.test" -test.v -test.run "$p" >"$OUT/$name.$i.out" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  i=0
  for p in "${pids[@]}"; do
    wait "$p" || rc=1
    local pat=${*:$((i + 1)):1}
    echo "--- process $i: -test.run '$pat'"
    cat "$OUT/$name.$i.out"
    # a subtest pattern with a typo would run its parent alone and pass
    if [ "$HAVE_GPU" = 1 ] && [[ $pat == */* ]] && ! grep -qE -- '--- (PASS|FAIL|SKIP): [^ ]+/' "$OUT/$name.$i.out"; then
      echo "--- FAIL: -test.run '$pat' matched no subtest"
      rc=1
    fi
    rm -f "$OUT/$name.$i.out"
    i=$((i + 1))
  done
  return "$rc"
}

# ---- unpack the binaries make gpu-bins built (no Go here)
mkdir -p "$BIN"
if [ -f "$CARRY/bins.tar.xz" ]; then
  if ! tar -C "$BIN" -xJf "$CARRY/bins.tar.xz" 2>>"$LOG"; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$CARRY/bins.tar.xz" "$BIN" 2>&1 | tee -a "$LOG"
  fi
  log "unpacked $CARRY/bins.tar.xz into $BIN: $(cd "$BIN" && echo *)"
else
  log "no $CARRY/bins.tar.xz: run make gpu-bins on a machine with Go and carry .dev/gpu"
fi

HAVE_GPU=0
SLOW=1
if nvidia-smi -L >/dev/null 2>&1; then HAVE_GPU=1; fi
if [ "$HAVE_GPU" = 1 ]; then
  export LLMSERVE_CUDA_REQUIRE_GPU=1
else
  log "no GPU (nvidia-smi -L fails): dry run, every stage takes its no-GPU path (limits x3: the emulator is slow)"
  SLOW=3
  BUDGET=$((BUDGET * SLOW))
fi
export ROOT OUT BIN HFREF HAVE_GPU
# the fatbin this run builds; a run without the build stage (a rerun in a fresh $OUT) takes the
# one in backend/cuda/kernels (copy a previous run's there), or LLMSERVE_CUDA_FATBIN as given
if [ -z "${LLMSERVE_CUDA_FATBIN:-}" ]; then
  LLMSERVE_CUDA_FATBIN=$OUT/kernels.fatbin
  if ! want build && [ -f backend/cuda/kernels/kernels.fatbin ]; then LLMSERVE_CUDA_FATBIN=$ROOT/backend/cuda/kernels/kernels.fatbin; fi
fi
export LLMSERVE_CUDA_FATBIN
log "fatbin: $LLMSERVE_CUDA_FATBIN"
export LLMSERVE_CUDA_GPU_ONLY=1 # the emulated halves of the end-to-end tests ran in CI
export -f par

st_env() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || echo "no nvidia-smi"
  (nvcc --version | tail -2) || echo "no nvcc"
  for t in compute-sanitizer ncu cuobjdump; do command -v "$t" || echo "no $t on PATH"; done
  echo "libcublasLt:"
  { ldconfig -p | grep -i cublasLt; find /usr/local /usr/lib /opt -maxdepth 7 -name 'libcublasLt.so*' 2>/dev/null | head -5; } || true
  ls -la "$BIN"
  (cd backend/cuda/internal/cu && "$BIN/cu.test" -test.v 2>&1 | tail -8)
  (cd backend/cuda/internal/cublaslt && "$BIN/cublaslt.test" -test.v 2>&1 | grep -E 'cuBLASLt|^(ok|FAIL|PASS)|---' | head -12)
  return 0
}

st_build() {
  command -v nvcc >/dev/null || { echo "no nvcc: the fatbin cannot be built here" | tee "$OUT/build.note"; return 1; }
  if make -C backend/cuda/kernels fatbin OUT="$OUT"; then
    grep -E 'registers|spill|stack frame' "$OUT/ptxas.txt" | head -80
    command -v cuobjdump >/dev/null && cuobjdump --list-elf --list-ptx "$OUT/kernels.fatbin"
    cat "$OUT/MANIFEST"
    return 0
  fi
  # one failed translation unit hides the rest: compile each source alone (at once) so the
  # next session sees every error of this build
  echo "=== the fatbin did not build; each source alone for sm_90a:"
  local f pids=()
  for f in backend/cuda/kernels/*.cu; do
    [ "$(basename "$f")" = all.cu ] && continue
    (nvcc -cubin -O3 -std=c++17 -arch=sm_90a -o /dev/null "$f" >"$OUT/build.$(basename "$f").err" 2>&1 &&
      echo "$f: ok" >>"$OUT/build.$(basename "$f").err") &
    pids+=($!)
  done
  wait "${pids[@]}"
  for f in "$OUT"/build.*.err; do echo "--- $f"; head -40 "$f"; done
  return 1
}

st_kernels() {
  cd backend/cuda || return 1
  # the decode GEMMs' and attention's Go references are the slow part: one process each
  par kernels '^TestKernelElementwise$' '^TestKernelGemm$' '^TestKernelSampling$' \
    '^TestKernelDecodeGemm$/^M1_N1024_K1024$' '^TestKernelDecodeGemm$/^M4_N6144_K1024$' \
    '^TestKernelDecodeGemm$/^M16_N1024_K3072$' '^TestKernelDecodeGemm$/^M33_N1536_K4096$' \
    '^TestKernelDecodeGemm$/^M1_N151936_K1024$' '^TestKernelLtGemm$' \
    '^TestKernelAttention$/^qwen3-0.6b$' '^TestKernelAttention$/^llama-8b$' '^TestKernelAttention$/^qwen2-7b$' \
    '^TestKernelAttention$/^head-64$' '^TestKernelAttention$/^head-256$' '^TestKernelAttention$/^wide-group$'
  local rc=$?
  # the output nearest its tolerance, for the summary
  grep -hoE '[^:]+: relative error [0-9.e+-]+ \(tolerance [0-9.e+-]+\)' "$OUT/kernels.log" 2>/dev/null |
    awk '{ t = $NF; gsub(/[()]/, "", t); e = $(NF - 2); if (t > 0 && e / t >= worst) { worst = e / t; line = $0 } }
      END { if (line != "") printf "nearest its tolerance: %s\n", line }' >"$OUT/kernels.note"
  return "$rc"
}

st_e2e() {
  cd backend/cuda || return 1
  local rc=0
  par e2e '^TestForwardMatchesReference$' '^TestForwardMatchesCPU$' '^TestBatchInvariance$' \
    '^TestAllLogits$' '^TestDeviceSamplingMatchesHost$' '^TestLongContextPartitions$' \
    '^TestQuantizedMatchesCPU$' '^TestQuantizedBatchInvariance$' '^TestConformance$/^gpu$/^graphs$' \
    '^TestConformance$/^gpu$/^eager$' || rc=1
  # the checkpoint hf_ref.py has been making since the start
  echo "=== waiting for hf_ref.py (pid ${HFREF_PID:-none})"
  while [ ! -f "$OUT/hf_ref.rc" ] && [ -n "${HFREF_PID:-}" ]; do sleep 1; done
  cat "$OUT/hf_ref.log" 2>/dev/null
  if [ "$(cat "$OUT/hf_ref.rc" 2>/dev/null)" = 0 ]; then
    LLMSERVE_HF_REF=$HFREF "$BIN/cuda.test" -test.v -test.run '^TestHFRandom$' 2>&1 | tee "$OUT/hf_test.out" || rc=1
    grep -oE 'prompt [0-9]+ \([0-9]+ tokens\): [0-9.e+-]+ of max' "$OUT/hf_test.out" | sed 's/ of max$//' |
      tr '\n' ';' | sed 's/^/ours vs transformers float32, share of max abs logit: /' >"$OUT/e2e.note"
    rm -f "$OUT/hf_test.out"
  else
    echo "hf_ref.py failed or did not run (exit $(cat "$OUT/hf_ref.rc" 2>/dev/null || echo none)): TestHFRandom not run"
    [ "$HAVE_GPU" = 1 ] && rc=1
  fi
  return "$rc"
}

st_bench() {
  local rc=0
  if [ "$HAVE_GPU" = 1 ] || python3 -c 'import torch' 2>/dev/null; then
    python3 scripts/gpu/hf_ref.py --rates >"$OUT/rates.json" || { echo "torch rates failed"; rm -f "$OUT/rates.json"; rc=1; }
    cat "$OUT/rates.json" 2>/dev/null
  else
    echo "no torch here: torch's GEMM and copy rates not measured"
  fi
  cd backend/cuda || return 1
  # -test.benchtime 1x: each benchmark body runs once and times >= 20 steps itself; where a
  # step's time goes first (kernel by kernel), the decode steps next (the issue's targets), the
  # decode GEMMs after
  "$BIN/cuda.test" -test.v -test.run '^$' -test.bench '^BenchmarkDecodeProfile$' -test.benchtime 1x || rc=1
  LLMSERVE_BENCH_JSON=$OUT/bench.json "$BIN/cuda.test" -test.v -test.run '^$' -test.bench '^(BenchmarkCopyBandwidth|BenchmarkDecode)$' -test.benchtime 1x || rc=1
  LLMSERVE_BENCH_JSON=$OUT/bench.json "$BIN/cuda.test" -test.v -test.run '^$' -test.bench '^(BenchmarkDecodeGemm|BenchmarkLtGemm)$' -test.benchtime 1x || rc=1
  return "$rc"
}

st_serve() {
  # 2,048 streams at once, all admitted into the batch (eager steps past the largest graph
  # bucket), each 16 prompt and 64 output tokens
  local port=${SERVE_PORT:-30123} c=2048 reqs=2048 olen=64 dur=15s rc=0 emu=()
  if [ "$HAVE_GPU" != 1 ]; then
    c=16 reqs=16 olen=4 dur=60s emu=(LLMSERVE_CUDA_EMULATE=1) # every kernel is Go there
  fi
  local run
  run=$(mktemp -d "${TMPDIR:-/tmp}/llmserve-gpu-run-XXXXXX")
  chmod 700 "$run"
  # `make run DEVICE=cuda` without its build step (no Go here): scripts/run.sh over the carried
  # binaries, in a process group of its own so that it is stopped as a whole
  env "${emu[@]}" LLMSERVE_BIN="$BIN" DEVICE=cuda PORT="$port" LLMSERVE_RUN_DIR="$run" KV_CACHE_MB=4096 \
    MAX_RUNNING_REQUESTS="$c" TOKENIZER_WORKERS=2 setsid scripts/run.sh >"$OUT/serve-engine.log" 2>&1 &
  local pid=$!
  echo "open files: soft $(ulimit -Sn), hard $(ulimit -Hn) (Go raises the soft limit to the hard one)"
  python3 scripts/gpu/serve_check.py --url "http://127.0.0.1:$port" --bin "$BIN" --wait 40 >>"$OUT/serve.json" || rc=1
  # the load only where the engine came up
  if python3 -c 'import json, sys; sys.exit(0 if json.loads(open(sys.argv[1]).read().splitlines()[-1])["checks"]["healthy"]["ok"] else 1)' "$OUT/serve.json" 2>/dev/null; then
    "$BIN/loadgen" -url "http://127.0.0.1:$port" -concurrency "$c" -requests "$reqs" -duration "$dur" -input-len 16 \
      -output-len "$olen" -check-drained -drain-timeout 15s -request-timeout 60s -progress 0 -json >"$OUT/loadgen.out" || rc=1
    cat "$OUT/loadgen.out"
    tail -n 1 "$OUT/loadgen.out" | grep '^{' | python3 -c 'import json, sys; print(json.dumps({"summary": json.load(sys.stdin)}))' >>"$OUT/serve.json" || true
  fi
  echo "loadgen at $c concurrent streams, $reqs requests of $olen tokens: exit $rc" >"$OUT/serve.note"
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null
  echo "=== engine log (last 40 lines)"
  tail -n 40 "$OUT/serve-engine.log"
  rm -rf "$run"
  return "$rc"
}

st_memcheck() {
  command -v compute-sanitizer >/dev/null || {
    echo "no compute-sanitizer on PATH: memcheck not run" | tee "$OUT/memcheck.note"
    [ "$HAVE_GPU" != 1 ]
    return
  }
  cd backend/cuda || return 1
  local rc=0
  # the kernel scenarios at small sizes, and the backend's own launches (graphs included) on
  # the fixtures, side by side
  LLMSERVE_CUDA_SMALL=1 compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 "$BIN/cuda.test" -test.v \
    -test.run '^TestKernel(Elementwise|Gemm|DecodeGemm|Attention|Sampling)$' >"$OUT/memcheck.0.out" 2>&1 &
  local k=$!
  compute-sanitizer --tool memcheck --error-exitcode 3 --print-limit 20 "$BIN/cuda.test" -test.v \
    -test.run '^TestForwardMatchesReference$' >"$OUT/memcheck.1.out" 2>&1 &
  local f=$!
  wait "$k" || rc=1
  wait "$f" || rc=1
  grep -vE 'relative error' "$OUT/memcheck.0.out"
  tail -n 40 "$OUT/memcheck.1.out"
  rm -f "$OUT"/memcheck.*.out
  return "$rc"
}
# Nsight Compute on the decode step's two heaviest kernels at batch 64 (attention and the decode
# GEMM, two launches each, after the warm-up steps): what bounds them (speed of light, memory,
# occupancy, warp stalls), for the next kernel change
st_ncu() {
  command -v ncu >/dev/null || {
    echo "no ncu on PATH: not profiled" | tee "$OUT/ncu.note"
    [ "$HAVE_GPU" != 1 ]
    return
  }
  [ "$HAVE_GPU" = 1 ] || { echo "no GPU: dry run"; return 0; }
  cd backend/cuda || return 1
  ncu --clock-control none -k 'regex:^(attn_decode|gemv_bf16)$' --launch-skip 2000 --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    "$BIN/cuda.test" -test.run '^$' -test.bench '^BenchmarkDecode$/^qwen3-0.6b/B=64/graphs=false$' -test.benchtime 1x
}
export -f st_env st_build st_kernels st_e2e st_bench st_serve st_memcheck st_ncu

want env && stage env 15 st_env

# the random Qwen3-0.6B-shaped checkpoint and transformers' logits, made while the fatbin builds
# (where torch or transformers is missing it fails at once, and the e2e stage says so)
if want e2e; then
  rm -f "$OUT/hf_ref.rc"
  # a subshell that stops hf_ref.py when it is told to stop (after the e2e stage)
  (
    timeout 200 python3 scripts/gpu/hf_ref.py --out "$HFREF" >"$OUT/hf_ref.log" 2>&1 &
    tp=$!
    trap 'kill "$tp" 2>/dev/null' TERM
    wait "$tp"
    echo $? >"$OUT/hf_ref.rc"
  ) &
  export HFREF_PID=$!
fi

want build && stage build 70 st_build
want kernels && stage kernels 45 st_kernels
want e2e && stage e2e 55 st_e2e
if [ -n "${HFREF_PID:-}" ] && kill -0 "$HFREF_PID" 2>/dev/null; then
  kill "$HFREF_PID" 2>/dev/null # never beside the benchmark
  log "hf_ref.py still running after the e2e stage: stopped"
fi
want bench && stage bench 140 st_bench
want serve && stage serve 50 st_serve
want memcheck && stage memcheck 35 st_memcheck
want ncu && stage ncu 45 st_ncu

summary
log ""
log "$(cat "$OUT/summary.md")"
log "total ${SECONDS}s"
exit $FAILED
