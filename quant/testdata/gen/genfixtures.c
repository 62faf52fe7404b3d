// genfixtures writes quant's test fixtures with llama.cpp's own ggml library (libggml-base.so from
// the prebuilt npm package @node-llama-cpp/linux-x64), so the Go quantizers and dequantizers are
// checked against output nobody here wrote. See gen.sh for how it is built and run.
//
// Files written to the directory given as argv[1]:
//   input.f32          ROWS*COLS float32 inputs (rows of different shapes of data, see fill())
//   <type>.q           ggml_quantize_chunk(type, input) bytes (no importance matrix)
//   <type>.deq         to_float(<type>.q) as float32
//   <type>.rand        RANDBLOCKS random blocks of <type> (scale fields set to random finite f16)
//   <type>.rand.deq    to_float(<type>.rand) as float32
//   convert.txt        FNV-1a 64 hashes of the fp32 -> f16 / bf16 conversions of all 2^32 bit
//                      patterns and of the f16 -> fp32 conversions of all 2^16
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 24, COLS = 512, RANDBLOCKS = 48 };

typedef void (*to_float_fn)(const void *, float *, int64_t);
// The head of ggml's struct ggml_type_traits (ggml.h); only to_float is read.
struct traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    _Bool is_quantized;
    to_float_fn to_float;
};

static size_t (*quantize_chunk)(int, const float *, void *, int64_t, int64_t, int64_t, const float *);
static const struct traits *(*get_traits)(int);
static size_t (*row_size)(int, int64_t);
static uint16_t (*fp32_to_fp16)(float);
static float (*fp16_to_fp32)(uint16_t);
static uint16_t (*fp32_to_bf16)(float);

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uniform(void) { return (float)((next() >> 11) * (1.0 / 9007199254740992.0)); }
static float gauss(void) {
    double u = (next() >> 11) * (1.0 / 9007199254740992.0) + 1e-300, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

// fill writes one row of a shape chosen by r: the cases the quantizers branch on.
static void fill(int r, float *x) {
    for (int i = 0; i < COLS; i++) {
        float g = gauss();
        switch (r % 12) {
        case 0: x[i] = 0.02f * g; break;                          // typical weights
        case 1: x[i] = 2 * uniform() - 1; break;                  // uniform
        case 2: x[i] = 0.02f * g * (i % 37 == 0 ? 50 : 1); break; // outliers
        case 3: x[i] = (i / 64) % 2 ? 0 : 0.1f * g; break;        // whole zero blocks
        case 4: x[i] = (i / 32) % 3 == 0 ? 0.5f : -0.25f; break;  // constant blocks
        case 5: x[i] = 1e-6f * g; break;                          // scales in f16's subnormals
        case 6: x[i] = 3000 * g; break;                           // large
        case 7: x[i] = fabsf(g); break;                           // positive only
        case 8: x[i] = -fabsf(0.1f * g); break;                   // negative only
        case 9: x[i] = (next() % 5 == 0) ? g : 0; break;          // sparse
        case 10: x[i] = 1e-9f * g; break;                         // scales below f16's range
        case 11: x[i] = (float)((int)(next() % 31) - 15) / 8; break; // few exact levels
        }
    }
}

static void write(const char *dir, const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        perror(path);
        exit(1);
    }
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: genfixtures LIBGGML_BASE_SO OUTDIR\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    quantize_chunk = dlsym(lib, "ggml_quantize_chunk");
    get_traits = dlsym(lib, "ggml_get_type_traits");
    row_size = dlsym(lib, "ggml_row_size");
    fp32_to_fp16 = dlsym(lib, "ggml_fp32_to_fp16");
    fp16_to_fp32 = dlsym(lib, "ggml_fp16_to_fp32");
    fp32_to_bf16 = dlsym(lib, "ggml_fp32_to_bf16");
    if (!quantize_chunk || !get_traits || !row_size || !fp32_to_fp16 || !fp16_to_fp32 || !fp32_to_bf16) {
        fprintf(stderr, "missing ggml symbol\n");
        return 1;
    }
    const char *dir = argv[2];

    static float in[ROWS * COLS];
    for (int r = 0; r < ROWS; r++) fill(r, in + r * COLS);
    write(dir, "input.f32", in, sizeof in);

    // GGML type ids: F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q6_K 14, BF16 30.
    static const struct { int id; const char *name; int scale_offsets[2]; } types[] = {
        {1, "f16", {-1, -1}}, {2, "q4_0", {0, -1}}, {8, "q8_0", {0, -1}},
        {12, "q4_k", {0, 2}}, {14, "q6_k", {208, -1}}, {30, "bf16", {-1, -1}},
    };
    static unsigned char q[ROWS * COLS * 4];
    static float deq[ROWS * COLS];
    char name[64];
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const struct traits *tr = get_traits(types[t].id);
        size_t n = quantize_chunk(types[t].id, in, q, 0, ROWS, COLS, NULL);
        if (n != ROWS * row_size(types[t].id, COLS)) {
            fprintf(stderr, "%s: quantize wrote %zu bytes\n", types[t].name, n);
            return 1;
        }
        snprintf(name, sizeof name, "%s.q", types[t].name);
        write(dir, name, q, n);
        tr->to_float(q, deq, ROWS * COLS);
        snprintf(name, sizeof name, "%s.deq", types[t].name);
        write(dir, name, deq, sizeof deq);

        if (!tr->is_quantized) continue;
        // Random blocks: every bit pattern of the quants, scales drawn as finite f16 values.
        size_t bb = tr->type_size, nb = RANDBLOCKS;
        static float rdeq[RANDBLOCKS * 256];
        for (size_t i = 0; i < nb * bb; i++) q[i] = (unsigned char)next();
        for (size_t b = 0; b < nb; b++) {
            for (int s = 0; s < 2; s++) {
                int off = types[t].scale_offsets[s];
                if (off < 0) continue;
                uint16_t h;
                do h = (uint16_t)next(); while ((h & 0x7c00) == 0x7c00 || (h & 0x7c00) < 0x2000 || (h & 0x7c00) > 0x5c00);
                memcpy(q + b * bb + off, &h, 2);
            }
        }
        snprintf(name, sizeof name, "%s.rand", types[t].name);
        write(dir, name, q, nb * bb);
        tr->to_float(q, rdeq, nb * tr->blck_size);
        snprintf(name, sizeof name, "%s.rand.deq", types[t].name);
        write(dir, name, rdeq, nb * tr->blck_size * sizeof(float));
    }

    uint64_t h16 = 0xcbf29ce484222325ull, hbf = h16, hback = h16;
    for (uint64_t u = 0; u < (1ull << 32); u++) {
        uint32_t bits = (uint32_t)u;
        float f;
        memcpy(&f, &bits, 4);
        uint16_t a = fp32_to_fp16(f), b = fp32_to_bf16(f);
        h16 = fnv(h16, &a, 2);
        hbf = fnv(hbf, &b, 2);
    }
    for (uint32_t u = 0; u < 65536; u++) {
        float f = fp16_to_fp32((uint16_t)u);
        hback = fnv(hback, &f, 4);
    }
    char text[256];
    int len = snprintf(text, sizeof text, "fp32_to_fp16 %016llx\nfp32_to_bf16 %016llx\nfp16_to_fp32 %016llx\n",
                       (unsigned long long)h16, (unsigned long long)hbf, (unsigned long long)hback);
    write(dir, "convert.txt", text, len);
    return 0;
}
