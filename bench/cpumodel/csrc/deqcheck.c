// deqcheck reads a GGUF file with llama.cpp's own parser (gguf_init_from_file in libggml-base.so)
// and dequantizes every tensor with ggml's to_float, printing one line per tensor:
//   name type_name elements fnv1a64(float32 bits of the dequantized values)
// cpumodel compares these with its own reader and dequantizers. Built by cpumodel with gcc and
// loaded against the prebuilt library, so nothing here reimplements ggml.
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*to_float_fn)(const void *, float *, int64_t);
// The leading fields of ggml's struct ggml_type_traits (ggml.h); only these are read.
struct traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    to_float_fn to_float;
};
struct gguf_init_params {
    bool no_alloc;
    void **ctx;
};

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "deqcheck: %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: deqcheck libggml-base.so file.gguf\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "deqcheck: %s\n", dlerror());
        return 1;
    }
    void *(*init)(const char *, struct gguf_init_params) = sym(lib, "gguf_init_from_file");
    int64_t (*n_tensors)(const void *) = sym(lib, "gguf_get_n_tensors");
    const char *(*tname)(const void *, int64_t) = sym(lib, "gguf_get_tensor_name");
    size_t (*toff)(const void *, int64_t) = sym(lib, "gguf_get_tensor_offset");
    int (*ttype)(const void *, int64_t) = sym(lib, "gguf_get_tensor_type");
    size_t (*tsize)(const void *, int64_t) = sym(lib, "gguf_get_tensor_size");
    size_t (*data_off)(const void *) = sym(lib, "gguf_get_data_offset");
    const struct traits *(*traits)(int) = sym(lib, "ggml_get_type_traits");

    struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
    void *ctx = init(argv[2], p);
    if (!ctx) {
        fprintf(stderr, "deqcheck: llama.cpp cannot read %s\n", argv[2]);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    for (int64_t i = 0; i < n_tensors(ctx); i++) {
        int type = ttype(ctx, i);
        const struct traits *tr = traits(type);
        size_t size = tsize(ctx, i);
        int64_t n = (int64_t)(size / tr->type_size) * tr->blck_size;
        void *raw = malloc(size);
        float *out = malloc(n * sizeof(float));
        if (fseeko(f, (off_t)(data_off(ctx) + toff(ctx, i)), SEEK_SET) != 0 || fread(raw, 1, size, f) != size) {
            fprintf(stderr, "deqcheck: short read of %s\n", tname(ctx, i));
            return 1;
        }
        if (type == 0) {
            memcpy(out, raw, size); // f32 has no to_float
        } else if (tr->to_float) {
            tr->to_float(raw, out, n);
        } else {
            fprintf(stderr, "deqcheck: no to_float for %s\n", tr->type_name);
            return 1;
        }
        uint64_t h = 14695981039346656037ull;
        const unsigned char *b = (const unsigned char *)out;
        for (size_t k = 0; k < (size_t)n * sizeof(float); k++) {
            h ^= b[k];
            h *= 1099511628211ull;
        }
        printf("%s %s %lld %016llx\n", tname(ctx, i), tr->type_name, (long long)n, (unsigned long long)h);
        free(raw);
        free(out);
    }
    return 0;
}
