#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build, run and test the engine: the cgo libraries
# (libzmq, OpenBLAS), Go module downloads, the npm packages used by the end-to-end tests,
# Prometheus (with promtool), which the metrics end-to-end test scrapes the engine with, clang,
# which compile-checks the CUDA kernels (make kernels-check; no GPU or CUDA toolkit needed), and
# Chromium, which the chat page's end-to-end test drives headless. It first checks what it does
# not install: Go (the version go.mod names, or newer) and node/npm (the e2e client tests), and
# says what to do when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Prerequisites: Go at the go.mod version. Debian's golang package is usually older: install from
# https://go.dev/dl (tar -C /usr/local -xzf go*.linux-amd64.tar.gz; PATH=$PATH:/usr/local/go/bin).
want_go=$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' go.mod)
if ! command -v go >/dev/null; then
  echo "setup: Go $want_go or newer is required and 'go' is not on PATH; install it from https://go.dev/dl and add its bin/ to PATH" >&2
  exit 1
fi
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -1)" != "$want_go" ]; then
  echo "setup: Go $want_go or newer is required (go.mod), found $have_go at $(command -v go); install a newer one from https://go.dev/dl (or let the go command fetch it: GOTOOLCHAIN=auto)" >&2
  exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: node and npm are not on PATH: make run works without them, but the end-to-end tests of the OpenAI Node clients need them (apt-get install nodejs npm, or Node 20+ from nodejs.org)" >&2
fi

need=()
for p in libzmq3-dev libopenblas-dev pkg-config prometheus clang chromium; do
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
if [ -f e2e/node/package.json ] && command -v npm >/dev/null && command -v node >/dev/null; then
  (cd e2e/node && npm ci --silent --no-audit --no-fund)
fi
echo "setup: done"
