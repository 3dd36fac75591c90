/* The shared part of gradax's single-pass CPU kernels (every fused_*.c includes it): error and metadata answers
 * to XLA's FFI (C API, xla/ffi/api/c_api.h), buffer helpers, and the job that splits a kernel's work over XLA's own
 * CPU thread pool.
 *
 * The work of a call is split into contiguous parts of the leaves laid end to end, run on XLA's thread pool
 * (XLA_FFI_ThreadPool_Schedule): the calling thread and the pool's threads claim parts from an atomic counter, so
 * the call completes even when the pool runs no task of it (a pool of one thread), and no thread is created.
 */
#ifndef GRADAX_FUSED_COMMON_H
#define GRADAX_FUSED_COMMON_H

#define _POSIX_C_SOURCE 200809L /* sched_yield under -std=c11 */

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

#include "fused_scalars.h" /* generated at build time: the order of each kernel's step scalars */


/* below this many elements per part, the cost of handing a part to another thread exceeds its work */
/* Each loop is compiled for x86-64-v4 (AVX-512 with VL/BW/DQ: 32 vector registers for 256-bit code too, so the
 * long loops of the bfloat16 and 8-bit steps do not spill), AVX2 and the baseline; the loader picks one per CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define GRADAX_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#elif defined(__x86_64__)
#define GRADAX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GRADAX_CLONES
#endif

#define MIN_ELEMENTS_PER_PART (1 << 15)
#define MAX_PARTS 64

static inline XLA_FFI_Error* make_error(const XLA_FFI_CallFrame* frame, const char* message) {
    XLA_FFI_Error_Create_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message;
    args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
    return frame->api->XLA_FFI_Error_Create(&args);
}

static inline void drop_error(const XLA_FFI_CallFrame* frame, XLA_FFI_Error* error) {
    if (error == NULL) return;
    XLA_FFI_Error_Destroy_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    args.error = error;
    frame->api->XLA_FFI_Error_Destroy(&args);
}

/* XLA asks a handler for the FFI version it was built against before using it. */
static inline int answer_metadata(XLA_FFI_CallFrame* frame) {
    XLA_FFI_Extension_Base* ext = frame->extension_start;
    if (ext == NULL || ext->type != XLA_FFI_Extension_Metadata) return 0;
    XLA_FFI_Metadata* metadata = ((XLA_FFI_Metadata_Extension*)ext)->metadata;
    metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
    metadata->api_version.extension_start = NULL;
    metadata->api_version.major_version = XLA_FFI_API_MAJOR;
    metadata->api_version.minor_version = XLA_FFI_API_MINOR;
    metadata->traits = 0;
    return 1;
}

static inline int64_t num_elements(const XLA_FFI_Buffer* b) {
    int64_t n = 1;
    for (int64_t d = 0; d < b->rank; ++d) n *= b->dims[d];
    return n;
}

static inline float* data_of(void* buffer) { return (float*)((XLA_FFI_Buffer*)buffer)->data; }

static inline XLA_FFI_DataType dtype_of(void* buffer) { return ((XLA_FFI_Buffer*)buffer)->dtype; }

static inline int is_buffer(const XLA_FFI_CallFrame* frame, int64_t i) {
    return frame->args.types[i] == XLA_FFI_ArgType_BUFFER;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* A job: parts of the leaves laid end to end, claimed by the caller and by tasks on XLA's thread pool. The job
 * (one allocation holding everything its parts read) is freed by the last of its holders, so a task the pool
 * starts after the call returned finds no part left and touches nothing else. */

typedef struct Job Job;
struct Job {
    int64_t n;        /* leaves */
    int64_t* offset;  /* offset[i]: start of leaf i; offset[n]: total */
    int parts;
    int workers;      /* the threads that claim parts (the caller and workers - 1 pool tasks); 0: one per part */
    void (*run)(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi);
    atomic_int next;  /* the next part to claim */
    atomic_int done;  /* parts finished */
    atomic_int refs;  /* the caller and every scheduled task */
    void* data;       /* kernel-specific, inside the same allocation */
    struct Item* items; /* a two-phase job's parts (see plan_two_phase), or NULL: parts of the leaves end to end */
    atomic_int* read_done; /* a two-phase job: the read parts finished, per group */
    int* read_parts;       /* a two-phase job: the read parts of each group */
    int64_t slots;         /* a two-phase job: the (phase 0 item, leaf it reads) pairs (Item.slot) */
    void* scratch;         /* a two-phase job: the kernel's bytes per slot (plan_two_phase), zeroed */
};

/* A part of a two-phase job: elements [begin, end) of the leaves laid end to end, in group `group`, of phase 0
 * (a read-only pass over the group) or phase 1 (the pass that needs the whole group's phase 0 first). */
typedef struct Item Item;
struct Item {
    int64_t begin, end;
    int group, phase;
    int64_t first_leaf; /* the leaf at begin */
    int64_t slot;       /* phase 0: the index of (this item, first_leaf) among every (phase 0 item, leaf it reads);
                         * (this item, first_leaf + j) is slot + j. A kernel can keep a partial result per slot. */
    int64_t reads;      /* phase 1: the first phase 0 item of the group */
};

static inline int64_t first_leaf_after(const Job* job, int64_t begin) {
    int64_t lo = 0, hi = job->n; /* the first leaf that ends after begin */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (job->offset[mid + 1] <= begin) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The leaf after the last one that starts before `end`, from `first` on. */
static inline int64_t leaf_end(const Job* job, int64_t first, int64_t end) {
    while (first < job->n && job->offset[first] < end) ++first;
    return first;
}

/* A backward range goes in chunks of this many elements (each chunk forward). */
#define BACKWARD_CHUNK (1 << 14)

/* Elements [begin, end) of the leaves laid end to end, leaf by leaf: job->run(job, k, leaf, lo, hi). Backward, the
 * last leaf first and each leaf from its end, so a pass starts on what the pass before read last: the part of a
 * group larger than the cache that is still in it. */
static inline void run_range(Job* job, int k, int64_t begin, int64_t end, int backward) {
    int64_t first = first_leaf_after(job, begin), last = leaf_end(job, first, end);
    for (int64_t step = 0; step < last - first; ++step) {
        int64_t leaf = backward ? last - 1 - step : first + step;
        int64_t a = begin > job->offset[leaf] ? begin - job->offset[leaf] : 0;
        int64_t b = (end < job->offset[leaf + 1] ? end : job->offset[leaf + 1]) - job->offset[leaf];
        if (!backward) {
            if (b > a) job->run(job, k, leaf, a, b);
            continue;
        }
        for (int64_t hi = b; hi > a;) {
            int64_t lo = hi - a > BACKWARD_CHUNK ? ((hi - BACKWARD_CHUNK) & ~(int64_t)15) : a;
            if (lo < a) lo = a;
            job->run(job, k, leaf, lo, hi);
            hi = lo;
        }
    }
}

static inline void run_part(Job* job, int k) {
    int64_t total = job->offset[job->n];
    /* parts start on multiples of 16 elements: no two threads write one cache line */
    int64_t begin = (total * k / job->parts) & ~(int64_t)15;
    int64_t end = k + 1 == job->parts ? total : (total * (k + 1) / job->parts) & ~(int64_t)15;
    run_range(job, k, begin, end, 0);
}

/* A two-phase job's part k: phase 1 waits for its group's phase 0, then goes backward (run_range). */
static inline void run_item(Job* job, int k) {
    const Item* item = &job->items[k];
    if (item->phase == 1) { /* every read part of the group was claimed before this one, by a running thread */
        while (atomic_load_explicit(&job->read_done[item->group], memory_order_acquire) < job->read_parts[item->group])
            sched_yield();
    }
    run_range(job, k, item->begin, item->end, item->phase == 1);
    if (item->phase == 0) atomic_fetch_add_explicit(&job->read_done[item->group], 1, memory_order_release);
}

static inline void work(Job* job) {
    for (;;) {
        int k = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (k >= job->parts) return;
        if (job->items != NULL) run_item(job, k);
        else run_part(job, k);
        atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
    }
}

static inline void release(Job* job) {
    if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) == 1) {
        free(job->scratch); /* a two-phase job's plan (plan_two_phase), NULL otherwise */
        free(job);
    }
}

static inline void job_task(void* data) {
    Job* job = (Job*)data;
    work(job);
    release(job);
}

static inline int pool_threads(XLA_FFI_CallFrame* frame) {
    const XLA_FFI_Api* api = frame->api;
    if (api->struct_size < XLA_FFI_Api_STRUCT_SIZE) return 1; /* an XLA without the thread-pool API */
    int64_t threads = 1;
    XLA_FFI_ThreadPool_NumThreads_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
    args.ctx = frame->ctx;
    args.num_threads = &threads;
    XLA_FFI_Error* err = api->XLA_FFI_ThreadPool_NumThreads(&args);
    if (err != NULL) {
        drop_error(frame, err);
        return 1;
    }
    return threads < 1 ? 1 : (int)threads;
}

static inline int parts_for(XLA_FFI_CallFrame* frame, int64_t total) {
    static atomic_int cap = 0; /* GRADAX_KERNEL_THREADS, read once */
    int c = atomic_load_explicit(&cap, memory_order_relaxed);
    if (c == 0) {
        const char* env = getenv("GRADAX_KERNEL_THREADS");
        long t = env ? strtol(env, NULL, 10) : MAX_PARTS;
        c = t < 1 ? 1 : (t > MAX_PARTS ? MAX_PARTS : (int)t);
        atomic_store_explicit(&cap, c, memory_order_relaxed);
    }
    int64_t by_size = total / MIN_ELEMENTS_PER_PART;
    int parts = pool_threads(frame);
    if (parts > c) parts = c;
    if (by_size < parts) parts = by_size < 1 ? 1 : (int)by_size;
    return parts;
}

/* Runs every part of the job (on the pool where it can), waits for them, and keeps the caller's reference. */
static inline void run_job(XLA_FFI_CallFrame* frame, Job* job) {
    atomic_init(&job->next, 0);
    atomic_init(&job->done, 0);
    int workers = job->workers > 0 && job->workers < job->parts ? job->workers : job->parts;
    atomic_init(&job->refs, workers); /* the caller + workers - 1 tasks */
    for (int k = 1; k < workers; ++k) {
        XLA_FFI_ThreadPool_Schedule_Args args;
        memset(&args, 0, sizeof(args));
        args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
        args.ctx = frame->ctx;
        args.task = job_task;
        args.data = job;
        XLA_FFI_Error* err = job->parts > 1 ? frame->api->XLA_FFI_ThreadPool_Schedule(&args) : NULL;
        if (err != NULL) { /* not scheduled: the caller does that part */
            drop_error(frame, err);
            atomic_fetch_sub_explicit(&job->refs, 1, memory_order_relaxed);
        }
    }
    work(job);
    while (atomic_load_explicit(&job->done, memory_order_acquire) < job->parts) sched_yield();
}

/* Runs `run` once per matrix of a batch of `batch` (the job's "leaves" are the matrices, 16 elements each, so parts
 * start on whole matrices), as many matrices at once as XLA's pool has threads, and waits for them. */
static inline void run_per_matrix(XLA_FFI_CallFrame* frame, Job* job, int64_t batch,
                                  void (*run)(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi)) {
    int threads = pool_threads(frame);
    if (threads > MAX_PARTS) threads = MAX_PARTS;
    for (int64_t b = 0; b <= batch; ++b) job->offset[b] = 16 * b;
    job->run = run;
    job->parts = batch < threads ? (int)batch : threads;
    job->workers = job->parts;
    run_job(frame, job);
}

/* One allocation: the Job, offset[n + 1], then `extra` bytes of kernel data (zeroed), 16-byte aligned. */
static inline Job* new_job(int64_t n, size_t extra) {
    size_t head = (sizeof(Job) + 15) & ~(size_t)15;
    size_t offsets = ((size_t)(n + 1) * sizeof(int64_t) + 15) & ~(size_t)15;
    char* block = (char*)calloc(1, head + offsets + extra);
    if (block == NULL) return NULL;
    Job* job = (Job*)block;
    job->n = n;
    job->offset = (int64_t*)(block + head);
    job->data = block + head + offsets;
    return job;
}

/* Makes `job` (its offsets set) a two-phase job: the leaves are cut into groups, consecutive leaves of at most
 * `group_elements` elements in all or one larger leaf alone, and each group into parts_for(its size) parts of
 * phase 0 (reading the group) followed by as many of phase 1 (updating it, once the whole group has been read; see
 * run_item). A group that fits in the cache is still there for phase 1, so its data comes from memory once.
 * job->scratch gets `slot_bytes` zeroed bytes per slot (Item.slot) for the kernel's partial results. Returns 0, or
 * -1 when out of memory. */
static inline int plan_two_phase(XLA_FFI_CallFrame* frame, Job* job, int64_t group_elements, size_t slot_bytes) {
    int64_t n = job->n, groups = 0, items = 0, slots = 0;
    for (int pass = 0; pass < 2; ++pass) {
        groups = items = slots = 0;
        for (int64_t first = 0; first < n;) {
            int64_t last = first + 1; /* the group: leaves [first, last) */
            while (last < n && job->offset[last + 1] - job->offset[first] <= group_elements) ++last;
            int64_t begin = job->offset[first], size = job->offset[last] - begin;
            int parts = parts_for(frame, size);
            int64_t reads = items;
            for (int phase = 0; phase < 2; ++phase)
                for (int k = 0; k < parts; ++k, ++items) {
                    int64_t lo = k == 0 ? begin : (begin + size * k / parts) & ~(int64_t)15;
                    int64_t hi = k + 1 == parts ? begin + size : (begin + size * (k + 1) / parts) & ~(int64_t)15;
                    int64_t leaf = first_leaf_after(job, lo), end = leaf_end(job, leaf, hi);
                    if (pass == 1) {
                        Item* item = &job->items[items];
                        *item = (Item){lo, hi, (int)groups, phase, leaf, phase == 0 ? slots : -1, reads};
                        job->read_parts[groups] = parts;
                    }
                    if (phase == 0) slots += end > leaf ? end - leaf : 1;
                }
            ++groups;
            first = last;
        }
        if (pass == 0) { /* one allocation: the kernel's slots, the items, the groups' counters and part counts */
            size_t scratch = ((size_t)slots * slot_bytes + 15) & ~(size_t)15;
            size_t head = scratch + (((size_t)items * sizeof(Item) + 15) & ~(size_t)15);
            char* block = (char*)calloc(1, head + (size_t)(groups + 1) * (sizeof(atomic_int) + sizeof(int)));
            if (block == NULL) return -1;
            job->scratch = block;
            job->items = (Item*)(block + scratch);
            job->read_done = (atomic_int*)(block + head);
            job->read_parts = (int*)(job->read_done + groups + 1);
        }
    }
    job->parts = (int)items;
    job->slots = slots;
    job->workers = parts_for(frame, job->offset[n]);
    return 0;
}

/* XLA passes an aliased result in its operand's buffer; copy first if it ever does not. */
static inline void* in_place(void* in, void* out, int64_t size, size_t item) {
    if (in != out && size > 0) memmove(out, in, (size_t)size * item);
    return out;
}

/* The bit patterns of float32 values (memcpy: no type punning through unions, which stops vectorization). */
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* bfloat16 <-> float32 on the bit patterns: widening is exact; narrowing rounds to nearest even (NaN stays NaN). */
static inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded); /* a select, no branch */
}

/* float32 rounded to bfloat16 and back: the value a bfloat16 array stores */
static inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

/* a * b + c, rounded once (a fused multiply-add) where XLA:CPU contracts it, twice where it does not. XLA:CPU
 * compiles for the host CPU with contraction on: on a CPU with FMA each multiply feeding an add becomes one fused
 * multiply-add. The library is built with -ffp-contract=off, so a kernel contracts exactly where it calls this with
 * `fused` set, and `fused` is a constant of each instruction-set variant (see fma_level). */
static inline __attribute__((always_inline)) float muladd(float a, float b, float c, int fused) {
    return fused ? fmaf(a, b, c) : a * b + c;
}

/* The instruction-set variant a kernel runs on this CPU: its loops are compiled once per level (a runtime flag
 * would keep them from vectorizing), like target_clones, which cannot make `fused` a constant per clone. */
enum FmaLevel { FMA_NONE, FMA_ONLY, FMA_AVX2, FMA_AVX512 };

static inline enum FmaLevel fma_level(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("fma")) return FMA_NONE;
    if (__builtin_cpu_supports("avx512f")) return FMA_AVX512;
    return __builtin_cpu_supports("avx2") ? FMA_AVX2 : FMA_ONLY;
#else
    return FMA_NONE;
#endif
}

/* The four variants of `body(args..., fused)`, as static functions name_avx512, name_avx2, name_fma (fused) and
 * name_baseline (not fused), and `name_for_cpu()` picking one; `params` and `args` are parenthesized lists. */
#define GRADAX_UNPAREN(...) __VA_ARGS__
#if defined(__x86_64__) || defined(__i386__)
#define GRADAX_FMA_VARIANTS(name, body, params, args)                                                                  \
    __attribute__((target("avx512f,fma"))) static void name##_avx512 params { body(GRADAX_UNPAREN args, 1); }          \
    __attribute__((target("avx2,fma"))) static void name##_avx2 params { body(GRADAX_UNPAREN args, 1); }               \
    __attribute__((target("fma"))) static void name##_fma params { body(GRADAX_UNPAREN args, 1); }                     \
    static void name##_baseline params { body(GRADAX_UNPAREN args, 0); }                                               \
    typedef void(*name##_fn) params;                                                                                   \
    static name##_fn name##_for_cpu(void) {                                                                            \
        switch (fma_level()) {                                                                                         \
        case FMA_AVX512: return name##_avx512;                                                                         \
        case FMA_AVX2: return name##_avx2;                                                                             \
        case FMA_ONLY: return name##_fma;                                                                              \
        default: return name##_baseline;                                                                               \
        }                                                                                                              \
    }
#else
#define GRADAX_FMA_VARIANTS(name, body, params, args)                                                                  \
    static void name##_baseline params { body(GRADAX_UNPAREN args, 0); }                                               \
    typedef void(*name##_fn) params;                                                                                   \
    static name##_fn name##_for_cpu(void) { return name##_baseline; }
#endif

#endif
