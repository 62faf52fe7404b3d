// ggmlbench times llama.cpp's own CPU matrix-vector kernels (ggml_mul_mat through the prebuilt
// libggml-cpu-<arch>.so of npm's @node-llama-cpp/linux-x64) on the shapes quant's
// BenchmarkMatMulDecode times, the same way: a graph of enough distinct weight matrices that
// they stream from memory (as in decode), computed with T threads; prints one JSON line per run
// with the weight bytes read per second.
//   gcc -O2 -o ggmlbench ggmlbench.c -ldl
//   ggmlbench BINS_DIR CPU_VARIANT TYPE ROWS COLS M THREADS REPS
// TYPE is a GGML type id (8 q8_0, 12 q4_k, 2 q4_0, 14 q6_k).
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "missing %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: ggmlbench BINS_DIR CPU_VARIANT TYPE ROWS COLS M THREADS REPS\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/libggml-base.so", argv[1]);
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", argv[1], argv[2]);
    void *cpu = base ? dlopen(path, RTLD_NOW | RTLD_GLOBAL) : NULL;
    if (!cpu) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int type = atoi(argv[3]), rows = atoi(argv[4]), cols = atoi(argv[5]), m = atoi(argv[6]), threads = atoi(argv[7]), reps = atoi(argv[8]);

    void (*cpu_init)(void) = sym(cpu, "ggml_cpu_init");
    void *(*init)(struct init_params) = sym(base, "ggml_init");
    void *(*new_tensor_2d)(void *, int, int64_t, int64_t) = sym(base, "ggml_new_tensor_2d");
    void *(*mul_mat)(void *, void *, void *) = sym(base, "ggml_mul_mat");
    void *(*new_graph)(void *) = sym(base, "ggml_new_graph");
    void (*expand)(void *, void *) = sym(base, "ggml_build_forward_expand");
    void *(*get_data)(void *) = sym(base, "ggml_get_data");
    size_t (*nbytes)(void *) = sym(base, "ggml_nbytes");
    size_t (*quantize_chunk)(int, const float *, void *, int64_t, int64_t, int64_t, const float *) = sym(base, "ggml_quantize_chunk");
    int (*compute)(void *, void *, int) = sym(cpu, "ggml_graph_compute_with_ctx");
    cpu_init();

    // Enough matrices to stream at least 256 MB per graph, as decode streams a model's weights.
    size_t one = 0;
    {
        struct init_params p = {1 << 20, NULL, true};
        void *c = init(p);
        one = nbytes(new_tensor_2d(c, type, cols, rows));
    }
    int count = (int)((256u << 20) / one) + 1;
    if (count > 200) count = 200;
    struct init_params p = {one * count + (size_t)count * m * rows * 4 + (size_t)m * cols * 4 + (256u << 20), NULL, false};
    void *ctx = init(p);
    void *x = new_tensor_2d(ctx, 0, cols, m);
    float *xs = get_data(x);
    uint64_t rng = 88172645463325252ull;
    float *src = malloc(sizeof(float) * (size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        src[i] = ((int)(rng % 2001) - 1000) * 2e-5f;
    }
    for (int i = 0; i < m * cols; i++) xs[i] = src[i % (rows * cols)] * 50;
    void *gf = new_graph(ctx);
    for (int k = 0; k < count; k++) {
        void *w = new_tensor_2d(ctx, type, cols, rows);
        quantize_chunk(type, src, get_data(w), 0, rows, cols, NULL);
        expand(gf, mul_mat(ctx, w, x));
    }
    compute(ctx, gf, threads); // warm up
    double best = 1e30, total = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        compute(ctx, gf, threads);
        double dt = (now() - t0) / count;
        total += dt;
        if (dt < best) best = dt;
    }
    printf("{\"engine\":\"llama.cpp\",\"type\":%d,\"rows\":%d,\"cols\":%d,\"m\":%d,\"threads\":%d,\"matrices\":%d,"
           "\"best_ns\":%.0f,\"mean_ns\":%.0f,\"best_gb_s\":%.2f,\"mean_gb_s\":%.2f}\n",
           type, rows, cols, m, threads, count, best * 1e9, total / reps * 1e9, one / best / 1e9, one / (total / reps) / 1e9);
    return 0;
}
