/* Paged decode attention on CPU, read straight from the KV block pools.
 *
 * One query token per sequence: out[b, h] = softmax(scale * q[b, h] . K[b]^T) V[b] over the sequence's
 * context, whose token i lives at slot table[b, i / bs] * bs + i % bs of the pools
 * ([num_blocks, bs, Hkv, D]). The query heads that share a KV head are processed together, so each key
 * and value is read (and widened to fp32) once per KV head. Scores, softmax and accumulation are fp32;
 * bf16 inputs are widened exactly and the output rounded to nearest even.
 *
 * Plain C99, no torch headers: engine/kernels/native_build.py compiles it with the system C compiler
 * and calls it through ctypes, which releases the GIL for the call.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUP 16   /* query heads per KV head handled in one pass */
#define MAX_DIM 256

typedef struct {
    const void *q, *k, *v;
    const int32_t *tables;
    const int32_t *lens;
    void *out;
    int64_t table_stride;
    int heads, kv_heads, dim, block_size, is_bf16;
    float scale;
    int64_t first, last;   /* work items [first, last): item = b * kv_heads + kv_head */
} job_t;

static inline float bf16_to_f32(uint16_t x) {
    union { uint32_t u; float f; } v = { (uint32_t)x << 16 };
    return v.f;
}

static inline uint16_t f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);   /* NaN stays NaN */
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);                 /* round to nearest even */
}

/* exp for x <= 0 (scores minus their max), vectorizable: 2^n * p(r), |rel. error| < 2e-7 */
static inline float exp_nonpositive(float x) {
    if (x < -87.0f) return 0.0f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    union { uint32_t u; float f; } scale = { (uint32_t)((int32_t)n + 127) << 23 };
    return p * scale.f;
}

/* Eight lanes as one value: GCC and clang lower it to one AVX register, or two SSE ones. */
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }

/* The lane sums of eight vectors, as one vector (sum of p[j] in lane j): a transpose-and-add tree of
 * 7 adds and 15 shuffles, where summing each vector on its own takes 8 x (3 adds + 3 shuffles). */
static inline v8f sum_each_of_8(const v8f p[8]) {
    const v8f r01 = __builtin_shufflevector(p[0], p[1], 0, 1, 8, 9, 4, 5, 12, 13)
                  + __builtin_shufflevector(p[0], p[1], 2, 3, 10, 11, 6, 7, 14, 15);
    const v8f r23 = __builtin_shufflevector(p[2], p[3], 0, 1, 8, 9, 4, 5, 12, 13)
                  + __builtin_shufflevector(p[2], p[3], 2, 3, 10, 11, 6, 7, 14, 15);
    const v8f r45 = __builtin_shufflevector(p[4], p[5], 0, 1, 8, 9, 4, 5, 12, 13)
                  + __builtin_shufflevector(p[4], p[5], 2, 3, 10, 11, 6, 7, 14, 15);
    const v8f r67 = __builtin_shufflevector(p[6], p[7], 0, 1, 8, 9, 4, 5, 12, 13)
                  + __builtin_shufflevector(p[6], p[7], 2, 3, 10, 11, 6, 7, 14, 15);
    const v8f q03 = __builtin_shufflevector(r01, r23, 0, 8, 2, 10, 4, 12, 6, 14)
                  + __builtin_shufflevector(r01, r23, 1, 9, 3, 11, 5, 13, 7, 15);   /* p0 p2 p1 p3, halves */
    const v8f q47 = __builtin_shufflevector(r45, r67, 0, 8, 2, 10, 4, 12, 6, 14)
                  + __builtin_shufflevector(r45, r67, 1, 9, 3, 11, 5, 13, 7, 15);
    const v8f s = __builtin_shufflevector(q03, q47, 0, 1, 2, 3, 8, 9, 10, 11)
                + __builtin_shufflevector(q03, q47, 4, 5, 6, 7, 12, 13, 14, 15);   /* p0 p2 p1 p3 p4 p6 p5 p7 */
    return __builtin_shufflevector(s, s, 0, 2, 1, 3, 4, 6, 5, 7);
}

static inline void widen(const void *src, int64_t offset, int is_bf16, int dim, float *dst) {
    if (is_bf16) {
        const uint16_t *s = (const uint16_t *)src + offset;
        for (int d = 0; d < dim; d++) dst[d] = bf16_to_f32(s[d]);
    } else {
        memcpy(dst, (const float *)src + offset, (size_t)dim * sizeof(float));
    }
}

/* `dim` and `is_bf16` are constants in each instance below, so the compiler unrolls and vectorizes the head
 * dimension fully (a kernel for any head size is 1.4x slower at 32) */
static inline __attribute__((always_inline)) void run_items_as(
    const job_t *job, float *scores, const int dim, const int is_bf16
) {
    const int group = job->heads / job->kv_heads, bs = job->block_size;
    float query[MAX_GROUP][MAX_DIM], acc[MAX_GROUP][MAX_DIM], row[MAX_DIM];
    for (int64_t item = job->first; item < job->last; item++) {
        const int64_t b = item / job->kv_heads;
        const int kv_head = (int)(item % job->kv_heads);
        const int32_t *table = job->tables + b * job->table_stride;
        const int len = job->lens[b];
        for (int g = 0; g < group; g++) {
            widen(job->q, (b * job->heads + (int64_t)kv_head * group + g) * dim, is_bf16, dim, query[g]);
            for (int d = 0; d < dim; d++) query[g][d] *= job->scale;
        }
        /* pass 1: every score, [group][len]. Small heads take eight keys at a time, summed by one tree: at 32
         * dims that is 1.5x faster per token; at 64 and 128, where the dot products outweigh their sums, slower */
        int i = 0;
        if (dim % 8 == 0 && dim <= 32) {
            float keys[8][MAX_DIM];
            for (; i + 8 <= len; i += 8) {
                for (int t = 0; t < 8; t++) {
                    const int64_t slot = (int64_t)table[(i + t) / bs] * bs + (i + t) % bs;
                    widen(job->k, (slot * job->kv_heads + kv_head) * dim, is_bf16, dim, keys[t]);
                }
                for (int g = 0; g < group; g++) {
                    v8f products[8];
                    for (int t = 0; t < 8; t++) {
                        v8f sum = load8(query[g]) * load8(keys[t]);
                        for (int d = 8; d < dim; d += 8) sum += load8(query[g] + d) * load8(keys[t] + d);
                        products[t] = sum;
                    }
                    const v8f dots = sum_each_of_8(products);
                    memcpy(scores + (int64_t)g * len + i, &dots, sizeof dots);
                }
            }
        }
        for (; i < len; i++) {
            const int64_t slot = (int64_t)table[i / bs] * bs + i % bs;
            widen(job->k, (slot * job->kv_heads + kv_head) * dim, is_bf16, dim, row);
            for (int g = 0; g < group; g++) {
                float dot = 0.0f;
                for (int d = 0; d < dim; d++) dot += query[g][d] * row[d];
                scores[(int64_t)g * len + i] = dot;
            }
        }
        /* softmax per query head */
        for (int g = 0; g < group; g++) {
            float *s = scores + (int64_t)g * len, max = -INFINITY, sum = 0.0f;
            for (int i = 0; i < len; i++) max = s[i] > max ? s[i] : max;
            for (int i = 0; i < len; i++) { s[i] = exp_nonpositive(s[i] - max); sum += s[i]; }
            const float inv = 1.0f / sum;
            for (int i = 0; i < len; i++) s[i] *= inv;
            memset(acc[g], 0, (size_t)dim * sizeof(float));
        }
        /* pass 2: weighted sum of the values */
        for (int i = 0; i < len; i++) {
            const int64_t slot = (int64_t)table[i / bs] * bs + i % bs;
            widen(job->v, (slot * job->kv_heads + kv_head) * dim, is_bf16, dim, row);
            for (int g = 0; g < group; g++) {
                const float p = scores[(int64_t)g * len + i];
                for (int d = 0; d < dim; d++) acc[g][d] += p * row[d];
            }
        }
        for (int g = 0; g < group; g++) {
            const int64_t offset = (b * job->heads + (int64_t)kv_head * group + g) * dim;
            if (is_bf16) {
                uint16_t *o = (uint16_t *)job->out + offset;
                for (int d = 0; d < dim; d++) o[d] = f32_to_bf16(acc[g][d]);
            } else {
                memcpy((float *)job->out + offset, acc[g], (size_t)dim * sizeof(float));
            }
        }
    }
}

#define INSTANCE(DIM)                                                                                   \
    static void run_bf16_##DIM(const job_t *job, float *scores) { run_items_as(job, scores, DIM, 1); }       \
    static void run_f32_##DIM(const job_t *job, float *scores) { run_items_as(job, scores, DIM, 0); }
INSTANCE(32)
INSTANCE(64)
INSTANCE(128)

static void run_items(const job_t *job, float *scores) {
    switch (job->dim * 2 + job->is_bf16) {
    case 32 * 2 + 1: run_bf16_32(job, scores); return;
    case 32 * 2: run_f32_32(job, scores); return;
    case 64 * 2 + 1: run_bf16_64(job, scores); return;
    case 64 * 2: run_f32_64(job, scores); return;
    case 128 * 2 + 1: run_bf16_128(job, scores); return;
    case 128 * 2: run_f32_128(job, scores); return;
    default: run_items_as(job, scores, job->dim, job->is_bf16);   /* any other head size */
    }
}

static void *run_job(void *arg) {
    job_t *job = (job_t *)arg;
    int max_len = 0;
    for (int64_t item = job->first; item < job->last; item++) {
        const int len = job->lens[item / job->kv_heads];
        max_len = len > max_len ? len : max_len;
    }
    float *scores = malloc((size_t)(job->heads / job->kv_heads) * (size_t)(max_len > 0 ? max_len : 1) * sizeof(float));
    if (scores == NULL) return (void *)1;
    run_items(job, scores);
    free(scores);
    return NULL;
}

/* Returns 0 on success, 1 on bad arguments, 2 when memory or a thread could not be had. */
int paged_decode_attention(
    const void *q, const void *k_cache, const void *v_cache, const int32_t *block_tables, int64_t table_stride,
    const int32_t *context_lens, void *out, int batch, int heads, int kv_heads, int dim, int block_size,
    float scale, int is_bf16, int num_threads
) {
    if (batch < 0 || kv_heads < 1 || heads % kv_heads || heads / kv_heads > MAX_GROUP || dim < 1 || dim > MAX_DIM
        || block_size < 1)
        return 1;
    const int64_t items = (int64_t)batch * kv_heads;
    if (num_threads < 1) num_threads = 1;
    if (num_threads > items) num_threads = (int)(items > 0 ? items : 1);
    job_t jobs[64];
    pthread_t threads[64];
    if (num_threads > 64) num_threads = 64;
    for (int t = 0; t < num_threads; t++) {
        jobs[t] = (job_t){ q, k_cache, v_cache, block_tables, context_lens, out, table_stride, heads, kv_heads,
                           dim, block_size, is_bf16, scale, items * t / num_threads, items * (t + 1) / num_threads };
    }
    int started = 1, failed = 0;
    for (; started < num_threads; started++)
        if (pthread_create(&threads[started], NULL, run_job, &jobs[started])) break;
    for (int t = started; t < num_threads; t++)   /* threads that could not start: this one runs their share */
        failed |= run_job(&jobs[t]) != NULL;
    failed |= run_job(&jobs[0]) != NULL;
    for (int t = 1; t < started; t++) {
        void *result;
        pthread_join(threads[t], &result);
        failed |= result != NULL;
    }
    return failed ? 2 : 0;
}
