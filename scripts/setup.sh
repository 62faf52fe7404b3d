#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, run and test the engine: the cgo libraries
# (libzmq, OpenBLAS), Go module downloads, the npm packages used by the end-to-end tests, and
# Prometheus (with promtool), which the metrics end-to-end test scrapes the engine with, and clang,
# which compile-checks the CUDA kernels (make kernels-check; no GPU or CUDA toolkit needed).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in libzmq3-dev libopenblas-dev pkg-config prometheus clang; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
go mod download
(cd deploy/kubernetes && go mod download) # the manifests test's own module (k8s.io/api)
if [ -f e2e/node/package.json ] && command -v npm >/dev/null; then
  (cd e2e/node && npm ci --silent --no-audit --no-fund)
fi
echo "setup: done"
