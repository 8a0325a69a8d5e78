/* Paged decode attention on CPU, read straight from the KV block pools.
 *
 * One query token per sequence: out[b, h] = softmax(scale * q[b, h] . K[b]^T) V[b] over the sequence's
 * context, whose token i lives at slot table[b, i / bs] * bs + i % bs of the pools
 * ([num_blocks, bs, Hkv, D]). The query heads that share a KV head are processed together, so each key
 * and value is read (and widened to fp32) once per KV head. Scores, softmax and accumulation are fp32;
 * bf16 inputs are widened exactly and the output rounded to nearest even.
 *
 * Large batches are split over threads of a pool that lives for the process; small ones run on the calling
 * thread alone, as waking a helper would cost more than it saves.
 *
 * Plain C99, no torch headers: engine/kernels/native_build.py compiles it with the system C compiler
 * and calls it through ctypes, which releases the GIL for the call.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
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

/* The pool slot of each of a sequence's first `len` tokens, block by block: token i lives at
 * table[i / bs] * bs + i % bs, and a division per token read (twice per token and KV head) cost as much
 * as the arithmetic at small heads */
static void fill_slots(const int32_t *table, int len, int bs, int64_t *slots) {
    for (int start = 0, block = 0; start < len; start += bs, block++) {
        const int64_t base = (int64_t)table[block] * bs;
        const int count = len - start < bs ? len - start : bs;
        for (int o = 0; o < count; o++) slots[start + o] = base + o;
    }
}

/* `dim` and `is_bf16` are constants in each instance below, so the compiler unrolls and vectorizes the head
 * dimension fully (a kernel for any head size is 1.4x slower at 32) */
static inline __attribute__((always_inline)) void run_items_as(
    const job_t *job, float *scores, int64_t *slots, const int dim, const int is_bf16, const int fixed_group
) {
    const int group = fixed_group ? fixed_group : job->heads / job->kv_heads, bs = job->block_size;
    float query[MAX_GROUP][MAX_DIM], acc[MAX_GROUP][MAX_DIM], row[MAX_DIM];
    int64_t slots_of = -1;   /* the sequence `slots` holds: items of one sequence (its KV heads) are adjacent */
    for (int64_t item = job->first; item < job->last; item++) {
        const int64_t b = item / job->kv_heads;
        const int kv_head = (int)(item % job->kv_heads);
        const int len = job->lens[b];
        if (b != slots_of) {
            fill_slots(job->tables + b * job->table_stride, len, bs, slots);
            slots_of = b;
        }
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
                    widen(job->k, (slots[i + t] * job->kv_heads + kv_head) * dim, is_bf16, dim, keys[t]);
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
            widen(job->k, (slots[i] * job->kv_heads + kv_head) * dim, is_bf16, dim, row);
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
            widen(job->v, (slots[i] * job->kv_heads + kv_head) * dim, is_bf16, dim, row);
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

/* One instance per head size, dtype and group size (query heads per KV head) that models use: with all three
 * constant the per-group accumulators live in registers (group 4 at 32: 1.2x faster than a runtime group) */
#define GROUP_CASE(DIM, BF16, GROUP) case GROUP: run_items_as(job, scores, slots, DIM, BF16, GROUP); return;
#define INSTANCE_AS(DIM, BF16, NAME)                                                                    \
    static void NAME(const job_t *job, float *scores, int64_t *slots) {                                 \
        switch (job->heads / job->kv_heads) {                                                           \
        GROUP_CASE(DIM, BF16, 1) GROUP_CASE(DIM, BF16, 2) GROUP_CASE(DIM, BF16, 4) GROUP_CASE(DIM, BF16, 8) \
        default: run_items_as(job, scores, slots, DIM, BF16, 0);                                        \
        }                                                                                               \
    }
#define INSTANCE(DIM) INSTANCE_AS(DIM, 1, run_bf16_##DIM) INSTANCE_AS(DIM, 0, run_f32_##DIM)
INSTANCE(32)
INSTANCE(64)
INSTANCE(128)

static void run_items(const job_t *job, float *scores, int64_t *slots) {
    switch (job->dim * 2 + job->is_bf16) {
    case 32 * 2 + 1: run_bf16_32(job, scores, slots); return;
    case 32 * 2: run_f32_32(job, scores, slots); return;
    case 64 * 2 + 1: run_bf16_64(job, scores, slots); return;
    case 64 * 2: run_f32_64(job, scores, slots); return;
    case 128 * 2 + 1: run_bf16_128(job, scores, slots); return;
    case 128 * 2: run_f32_128(job, scores, slots); return;
    default: run_items_as(job, scores, slots, job->dim, job->is_bf16, 0);   /* any other head size */
    }
}

static void *run_job(void *arg) {
    job_t *job = (job_t *)arg;
    int max_len = 0;
    for (int64_t item = job->first; item < job->last; item++) {
        const int len = job->lens[item / job->kv_heads];
        max_len = len > max_len ? len : max_len;
    }
    const size_t room = (size_t)(max_len > 0 ? max_len : 1);
    float *scores = malloc((size_t)(job->heads / job->kv_heads) * room * sizeof(float));
    int64_t *slots = malloc(room * sizeof(int64_t));
    if (scores == NULL || slots == NULL) {
        free(scores);
        free(slots);
        return (void *)1;
    }
    run_items(job, scores, slots);
    free(scores);
    free(slots);
    return NULL;
}

/* Helper threads that live for the process and wait between calls. Starting a thread per call cost ~70 us,
 * as much as a small batch's whole attention, at every layer of every decode step. One call uses the pool at
 * a time; a call that finds it busy (another thread is inside the kernel) runs its jobs on its own thread. */
#define MAX_THREADS 64
/* Waking a helper costs 5-70 us (more where its core sat idle, as a VM's vCPU does): each thread gets at least
 * this much work, in context tokens x query heads x head size (~15 us of one thread). */
#define MIN_WORK_PER_THREAD (1 << 18)
static struct {
    pthread_mutex_t lock;                 /* guards the fields below */
    pthread_cond_t work, done;
    const job_t *jobs;                    /* this call's jobs: helper h runs jobs[h + 1] */
    int helpers;                          /* started */
    int wanted;                           /* helpers that run a job in this call */
    int pending;                          /* of those, not finished */
    int failed;
    unsigned long generation;             /* bumped once per call */
    unsigned long born_at[MAX_THREADS];   /* the generation each helper was started in */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };
static pthread_mutex_t pool_in_use = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void *helper_loop(void *arg) {
    const int index = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    unsigned long seen = pool.born_at[index];
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.generation;
        if (index >= pool.wanted) continue;
        const job_t *job = &pool.jobs[index + 1];
        pthread_mutex_unlock(&pool.lock);
        const int failed = run_job((void *)job) != NULL;
        pthread_mutex_lock(&pool.lock);
        pool.failed |= failed;
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* A forked child has none of the parent's helpers (and maybe a lock a parent thread held): start afresh. */
static void reset_pool_in_child(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pthread_mutex_init(&pool_in_use, NULL);
    pool.helpers = pool.wanted = pool.pending = 0;
}

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, reset_pool_in_child); }

/* Runs jobs[0..count) on this thread and up to count - 1 helpers; nonzero if any failed. */
static int run_jobs(job_t *jobs, int count) {
    int failed = 0, helpers = 0;
    const int pooled = count > 1 && pthread_mutex_trylock(&pool_in_use) == 0;
    if (pooled) {
        pthread_once(&fork_handler_once, register_fork_handler);
        pthread_mutex_lock(&pool.lock);
        sigset_t all, caller;   /* helpers block every signal: the process's signals go to its own threads */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &caller);
        while (pool.helpers < count - 1) {
            pthread_t thread;
            pool.born_at[pool.helpers] = pool.generation;
            if (pthread_create(&thread, NULL, helper_loop, (void *)(intptr_t)pool.helpers)) break;
            pthread_detach(thread);
            pool.helpers++;
        }
        pthread_sigmask(SIG_SETMASK, &caller, NULL);
        helpers = pool.helpers < count - 1 ? pool.helpers : count - 1;
        pool.jobs = jobs;
        pool.wanted = pool.pending = helpers;
        pool.failed = 0;
        pool.generation++;
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.lock);
    }
    failed |= run_job(&jobs[0]) != NULL;
    for (int t = helpers + 1; t < count; t++)   /* shares no helper took: this thread runs them */
        failed |= run_job(&jobs[t]) != NULL;
    if (pooled) {
        pthread_mutex_lock(&pool.lock);
        while (pool.pending) pthread_cond_wait(&pool.done, &pool.lock);
        failed |= pool.failed;
        pthread_mutex_unlock(&pool.lock);
        pthread_mutex_unlock(&pool_in_use);
    }
    return failed;
}

/* Returns 0 on success, 1 on bad arguments, 2 when memory could not be had. */
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
    if (num_threads > MAX_THREADS) num_threads = MAX_THREADS;
    int64_t work = 0;
    for (int b = 0; b < batch; b++) work += (int64_t)context_lens[b] * heads * dim;
    const int64_t worth = work / MIN_WORK_PER_THREAD;   /* threads this much work pays for */
    if (worth < num_threads) num_threads = worth > 1 ? (int)worth : 1;
    job_t jobs[MAX_THREADS];
    for (int t = 0; t < num_threads; t++) {
        jobs[t] = (job_t){ q, k_cache, v_cache, block_tables, context_lens, out, table_stride, heads, kv_heads,
                           dim, block_size, is_bf16, scale, items * t / num_threads, items * (t + 1) / num_threads };
    }
    return run_jobs(jobs, num_threads) ? 2 : 0;
}
