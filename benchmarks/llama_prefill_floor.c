/* llama.cpp's own prefill loop without Python, as llama-bench's pp times it:
 * llama_decode(llama_batch_get_one(tokens, n)) then llama_synchronize, timed with CLOCK_MONOTONIC,
 * against llama_perf_context's t_p_eval_ms of the same call, per generation (the cache cleared and
 * the counters reset before each); then 15 one-token steps, against t_eval_ms. The context as
 * llama-cpp-python's Llama(n_ctx=256, n_threads=1) makes it (n_batch = n_ubatch = n_ctx, flash
 * attention off, perf counters on). What it prints is the floor of the share ours can reach: the
 * time llama_decode spends before its counter starts (llama_batch_get_one's batch converted into
 * llama.cpp's per-token batch, then checked) is llama.cpp's. Built and run by bench_llama_prefill.py
 * --c-floor; usage: floor MODEL.gguf [generations] [prompt tokens]. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "llama.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, n, sizeof(double), by_value);
    return values[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [generations] [prompt tokens]\n", argv[0]);
        return 2;
    }
    int generations = argc > 2 ? atoi(argv[2]) : 40, n = argc > 3 ? atoi(argv[3]) : 64;
    if (generations < 1 || n < 2 || n > 240) {
        fprintf(stderr, "generations >= 1, 2 <= prompt tokens <= 240\n");
        return 2;
    }
    llama_log_set(NULL, NULL);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (model == NULL) {
        fprintf(stderr, "%s: cannot load\n", argv[1]);
        return 1;
    }
    struct llama_context_params params = llama_context_default_params();
    params.n_ctx = params.n_batch = params.n_ubatch = 256;
    params.n_threads = params.n_threads_batch = 1;
    params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    params.no_perf = 0;
    struct llama_context *ctx = llama_init_from_model(model, params);
    llama_memory_t memory = llama_get_memory(ctx);
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_token tokens[256];
    for (int i = 0; i < n; i++) tokens[i] = (7 * i + 3) % vocab;
    double *ours = malloc(generations * sizeof(double)), *gap = malloc(generations * sizeof(double));
    double *share = malloc(generations * sizeof(double)), *step_share = malloc(generations * sizeof(double));
    for (int g = -3; g < generations; g++) {  /* 3 warm-ups */
        llama_memory_clear(memory, 1);
        llama_perf_context_reset(ctx);
        double start = now_us();
        if (llama_decode(ctx, llama_batch_get_one(tokens, n)) != 0) return 1;
        llama_synchronize(ctx);
        double end = now_us();
        llama_token next = tokens[n - 1];
        double steps_start = now_us();
        for (int k = 0; k < 15; k++) {
            if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
            llama_synchronize(ctx);
        }
        double steps_end = now_us();
        if (g < 0) continue;
        struct llama_perf_context_data perf = llama_perf_context(ctx);
        ours[g] = end - start;
        gap[g] = end - start - perf.t_p_eval_ms * 1000;
        share[g] = perf.t_p_eval_ms * 1000 / (end - start);
        step_share[g] = perf.t_eval_ms * 1000 / (steps_end - steps_start);
    }
    printf("C floor (no Python): llama_decode + llama_synchronize %.1f us, uncounted %.1f us, prefill share %.4f, "
           "decode share %.4f (median of %d)\n", median(ours, generations), median(gap, generations),
           median(share, generations), median(step_share, generations), generations);
    return 0;
}
