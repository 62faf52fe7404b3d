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

# What a GPU machine (no Go there) needs for scripts/gpu/check.sh: the CUDA backend's test
# binaries, built without cgo, in .dev/gpu (git-ignored; the working tree travels with it).
gpu-bins:
	mkdir -p .dev/gpu
	CGO_ENABLED=0 $(GO) test -c -o .dev/gpu/cuda.test ./backend/cuda
	CGO_ENABLED=0 $(GO) test -c -o .dev/gpu/cu.test ./backend/cuda/internal/cu
	CGO_ENABLED=0 $(GO) test -c -o .dev/gpu/cublaslt.test ./backend/cuda/internal/cublaslt
	@ls -la .dev/gpu

lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./...

fmt:
	gofmt -w .
