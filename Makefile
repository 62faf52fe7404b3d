# Build, run and test the engine. `make setup` once on a fresh machine, then `make run` / `make test`.
GO ?= go
BIN := bin
export OPENBLAS_NUM_THREADS ?= 2

.PHONY: setup build run test lint bench fmt kernels-check gpu-bins

setup:
	./scripts/setup.sh

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# Serves models/pico at 127.0.0.1:30000; MODEL (or MODEL_PATH: a Hugging Face directory or a GGUF
# file), HOST, PORT, TOKENIZER_WORKERS, DEVICE (cpu, or cuda / cuda:K for GPU K), DP_SIZE,
# SKIP_DETOKENIZATION and SKIP_TOKENIZER_INIT override the defaults, as do the variables every
# flag reads (API_KEY, KV_CACHE_MB, CONTEXT_LENGTH, LOG_FORMAT, ...: see `bin/tokenizerd serve --help`
# and `bin/schedulerd serve --help`). A configuration error stops it with exit status 78 and the
# reason.
run: build
	./scripts/run.sh

# The whole suite: vet, the cgo build (libzmq, OpenBLAS) and the pure-Go build (go-zeromq, Go GEMM).
test: kernels-check
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout 15m ./ipc/... ./backend/... ./model/... ./quant/... ./gguf/...
	# The Kubernetes manifests' strict decoding: a module of its own (k8s.io/api stays out of go.mod).
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...

# Compiles every CUDA kernel with clang (no CUDA headers or GPU needed; scripts/setup.sh installs
# clang), checks each kernel's parameters against its Go argument struct, and that the kernel
# sources still match backend/cuda/kernels/MANIFEST.
kernels-check:
	LLMSERVE_REQUIRE_CLANG=1 $(GO) test -count=1 -run 'TestKernelsCompile|TestManifest|TestStaleSources|TestNoFatbin' ./backend/cuda/

# What a GPU machine (no Go there) needs for scripts/gpu/check.sh, in .dev/gpu/bins.tar.xz
# (git-ignored; carried with the working tree, which may hold 64 MiB in all): the CUDA backend's
# test binaries, the engine's binaries and bench/loadgen, built without cgo and stripped, then
# xz-compressed (38 MB of engine binaries become ~10). scripts/gpu/carry-size.sh fails if the
# tracked files plus .dev/gpu pass 60 MiB.
GPU_STAGE := .dev/gpu-stage
GPU_LDFLAGS := -trimpath -ldflags='-s -w'
gpu-bins:
	rm -rf $(GPU_STAGE) .dev/gpu && mkdir -p $(GPU_STAGE) .dev/gpu
	CGO_ENABLED=0 $(GO) test -c $(GPU_LDFLAGS) -o $(GPU_STAGE)/cuda.test ./backend/cuda
	CGO_ENABLED=0 $(GO) test -c $(GPU_LDFLAGS) -o $(GPU_STAGE)/cu.test ./backend/cuda/internal/cu
	CGO_ENABLED=0 $(GO) test -c $(GPU_LDFLAGS) -o $(GPU_STAGE)/cublaslt.test ./backend/cuda/internal/cublaslt
	CGO_ENABLED=0 $(GO) build $(GPU_LDFLAGS) -o $(GPU_STAGE)/ ./cmd/schedulerd ./cmd/tokenizerd ./cmd/detokd ./cmd/procfile ./bench/loadgen
	tar -C $(GPU_STAGE) -cf - . | xz -6 -T0 > .dev/gpu/bins.tar.xz
	rm -rf $(GPU_STAGE)
	./scripts/gpu/carry-size.sh

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./...

fmt:
	gofmt -w .
