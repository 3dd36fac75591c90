/* Single-pass CPU kernels for gradax.fused, called from XLA through its FFI (C API, xla/ffi/api/c_api.h).
 *
 * gradax_adamw_step: one pass over every float32 leaf of the tree reads p, g, m, v and writes p, m, v in place
 * (28 bytes per parameter), where XLA:CPU's one-kernel-per-output fusions move 40. Operands:
 *   args[0]        float32[NS] step scalars (see enum Scalar)
 *   args[1]        float32[n] weight decay per leaf (0 where the mask leaves a leaf undecayed)
 *   args[2+i]      params leaf i,     args[2+n+i] grads leaf i,
 *   args[2+2n+i]   first moment i,    args[2+3n+i] second moment i
 *   rets[i]        new params i, rets[n+i] new first moment i, rets[2n+i] new second moment i
 * The results alias the params and moments operands (input_output_aliases), so the update is in place.
 *
 * gradax_sum_squares: args[i] float32 leaves; rets[0] float32[n], the sum of squares of each leaf.
 *
 * The work of a call is split into contiguous parts of the leaves laid end to end, run on XLA's own CPU thread pool
 * (XLA_FFI_ThreadPool_Schedule): the calling thread and the pool's threads claim parts from an atomic counter, so
 * the call completes even when the pool runs no task of it (a pool of one thread), and no thread is created.
 */
#define _POSIX_C_SOURCE 200809L /* sched_yield under -std=c11 */

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xla/ffi/api/c_api.h"

enum Scalar {
    S_B1,            /* beta1 */
    S_ONE_MINUS_B1,  /* 1 - beta1 */
    S_B2,            /* beta2 */
    S_ONE_MINUS_B2,  /* 1 - beta2 */
    S_C1,            /* 1 - beta1**t */
    S_C1_NEXT,       /* 1 - beta1**(t+1) (Nesterov) */
    S_C2,            /* 1 - beta2**t */
    S_EPS,
    S_EPS_ROOT,
    S_NEG_LR,        /* -learning_rate */
    S_GRAD_SCALE,    /* the clipping factor (1 without clipping) */
    S_NESTEROV,      /* 1.0 for NAdamW */
    NS
};

/* below this many elements per part, the cost of handing a part to another thread exceeds its work */
#define MIN_ELEMENTS_PER_PART (1 << 15)
#define MAX_PARTS 64

static XLA_FFI_Error* make_error(const XLA_FFI_CallFrame* frame, const char* message) {
    XLA_FFI_Error_Create_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message;
    args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
    return frame->api->XLA_FFI_Error_Create(&args);
}

static void drop_error(const XLA_FFI_CallFrame* frame, XLA_FFI_Error* error) {
    if (error == NULL) return;
    XLA_FFI_Error_Destroy_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    args.error = error;
    frame->api->XLA_FFI_Error_Destroy(&args);
}

/* XLA asks a handler for the FFI version it was built against before using it. */
static int answer_metadata(XLA_FFI_CallFrame* frame) {
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

static int64_t num_elements(const XLA_FFI_Buffer* b) {
    int64_t n = 1;
    for (int64_t d = 0; d < b->rank; ++d) n *= b->dims[d];
    return n;
}

static float* data_of(void* buffer) { return (float*)((XLA_FFI_Buffer*)buffer)->data; }

static int all_float32_buffers(const XLA_FFI_CallFrame* frame) {
    for (int64_t i = 0; i < frame->args.size; ++i) {
        if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER) return 0;
        if (((XLA_FFI_Buffer*)frame->args.args[i])->dtype != XLA_FFI_DataType_F32) return 0;
    }
    return 1;
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
    void (*run)(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi);
    atomic_int next;  /* the next part to claim */
    atomic_int done;  /* parts finished */
    atomic_int refs;  /* the caller and every scheduled task */
    void* data;       /* kernel-specific, inside the same allocation */
};

static void run_part(Job* job, int k) {
    int64_t total = job->offset[job->n];
    /* parts start on multiples of 16 elements: no two threads write one cache line */
    int64_t begin = (total * k / job->parts) & ~(int64_t)15;
    int64_t end = k + 1 == job->parts ? total : (total * (k + 1) / job->parts) & ~(int64_t)15;
    int64_t lo = 0, hi = job->n; /* the first leaf that ends after begin */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (job->offset[mid + 1] <= begin) lo = mid + 1; else hi = mid;
    }
    for (int64_t leaf = lo; leaf < job->n && job->offset[leaf] < end; ++leaf) {
        int64_t a = begin > job->offset[leaf] ? begin - job->offset[leaf] : 0;
        int64_t b = (end < job->offset[leaf + 1] ? end : job->offset[leaf + 1]) - job->offset[leaf];
        if (b > a) job->run(job, k, leaf, a, b);
    }
}

static void work(Job* job) {
    for (;;) {
        int k = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (k >= job->parts) return;
        run_part(job, k);
        atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
    }
}

static void release(Job* job) {
    if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) == 1) free(job);
}

static void job_task(void* data) {
    Job* job = (Job*)data;
    work(job);
    release(job);
}

static int pool_threads(XLA_FFI_CallFrame* frame) {
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

static int parts_for(XLA_FFI_CallFrame* frame, int64_t total) {
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
static void run_job(XLA_FFI_CallFrame* frame, Job* job) {
    atomic_init(&job->next, 0);
    atomic_init(&job->done, 0);
    atomic_init(&job->refs, job->parts); /* the caller + parts - 1 tasks */
    for (int k = 1; k < job->parts; ++k) {
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

/* One allocation: the Job, offset[n + 1], then `extra` bytes of kernel data (zeroed), 16-byte aligned. */
static Job* new_job(int64_t n, size_t extra) {
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

/* ---------------------------------------------------------------------------------------------------------- */
/* AdamW */

typedef struct {
    float s[NS];
    float* wd;
    float **p, **g, **m, **v; /* updated in place (the results alias the operands) */
} AdamW;

/* In place, with restrict pointers: the compiler vectorizes without runtime overlap checks (an exact alias of
 * input and output would fail those checks and fall back to the scalar loop). Loop-invariant branches (Nesterov,
 * decay) are unswitched: each variant is one vector loop. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void adamw_span(const float* s, float wd, float* restrict p, const float* restrict g, float* restrict m,
                       float* restrict v, int64_t lo, int64_t hi) {
    const float b1 = s[S_B1], omb1 = s[S_ONE_MINUS_B1], b2 = s[S_B2], omb2 = s[S_ONE_MINUS_B2];
    const float c1 = s[S_C1], c1n = s[S_C1_NEXT], c2 = s[S_C2], eps = s[S_EPS], eps_root = s[S_EPS_ROOT];
    const float neg_lr = s[S_NEG_LR], scale = s[S_GRAD_SCALE];
    const int nesterov = s[S_NESTEROV] != 0.0f, decay = wd != 0.0f;
    for (int64_t i = lo; i < hi; ++i) {
        float gi = g[i] * scale;
        float mi = omb1 * gi + b1 * m[i];
        float vi = omb2 * (gi * gi) + b2 * v[i];
        float mhat = nesterov ? b1 * (mi / c1n) + omb1 * (gi / c1) : mi / c1;
        float u = mhat / (sqrtf(vi / c2 + eps_root) + eps);
        float pi = p[i];
        if (decay) u = u + wd * pi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + u * neg_lr;
    }
}

static void adamw_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    AdamW* a = (AdamW*)job->data;
    adamw_span(a->s, a->wd[leaf], a->p[leaf], a->g[leaf], a->m[leaf], a->v[leaf], lo, hi);
}

/* XLA passes an aliased result in its operand's buffer; copy first if it ever does not. */
static float* in_place(float* in, float* out, int64_t size) {
    if (in != out && size > 0) memmove(out, in, (size_t)size * sizeof(float));
    return out;
}

XLA_FFI_Error* gradax_adamw_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 2 || (nargs - 2) % 4 != 0 || nrets != 3 * ((nargs - 2) / 4))
        return make_error(frame, "gradax_adamw_step: expected 2 + 4n operands and 3n results");
    if (!all_float32_buffers(frame)) return make_error(frame, "gradax_adamw_step: every operand must be float32");
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (num_elements((XLA_FFI_Buffer*)args[0]) != NS || num_elements((XLA_FFI_Buffer*)args[1]) != n)
        return make_error(frame, "gradax_adamw_step: wrong number of scalars or weight decays");
    size_t ptrs = (size_t)(n > 0 ? n : 1) * sizeof(float*);
    size_t wd_bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    Job* job = new_job(n, sizeof(AdamW) + 4 * ptrs + wd_bytes);
    if (job == NULL) return make_error(frame, "gradax_adamw_step: out of memory");
    AdamW* a = (AdamW*)job->data;
    char* cursor = (char*)job->data + sizeof(AdamW);
    a->p = (float**)cursor; a->g = (float**)(cursor + ptrs);
    a->m = (float**)(cursor + 2 * ptrs); a->v = (float**)(cursor + 3 * ptrs);
    a->wd = (float*)(cursor + 4 * ptrs);
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->wd, data_of(args[1]), (size_t)n * sizeof(float));
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t size = num_elements((XLA_FFI_Buffer*)args[2 + i]);
        for (int k = 1; k < 4; ++k) {
            if (num_elements((XLA_FFI_Buffer*)args[2 + k * n + i]) != size) {
                free(job);
                return make_error(frame, "gradax_adamw_step: params, grads and moments differ in size");
            }
        }
        a->p[i] = in_place(data_of(args[2 + i]), data_of(rets[i]), size);
        a->g[i] = data_of(args[2 + n + i]);
        a->m[i] = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), size);
        a->v[i] = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), size);
        job->offset[i + 1] = job->offset[i] + size;
    }
    job->parts = parts_for(frame, job->offset[n]);
    job->run = adamw_run;
    run_job(frame, job);
    release(job);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Sum of squares per leaf: each part adds into its own row of partial sums, the caller adds the rows. */

typedef struct {
    float** x;
    double* partial; /* [parts][n] */
} SumSq;

__attribute__((target_clones("avx512f", "avx2", "default")))
static double sum_squares_span(const float* restrict x, int64_t lo, int64_t hi) {
    float acc[16] = {0}; /* 16 float32 partial sums (one vector), combined in double */
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        for (int k = 0; k < 16; ++k) acc[k] += x[i + k] * x[i + k];
    double total = 0.0;
    for (int k = 0; k < 16; ++k) total += acc[k];
    for (; i < hi; ++i) total += (double)x[i] * x[i];
    return total;
}

static void sumsq_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    SumSq* s = (SumSq*)job->data;
    s->partial[(size_t)part * (size_t)job->n + (size_t)leaf] += sum_squares_span(s->x[leaf], lo, hi);
}

XLA_FFI_Error* gradax_sum_squares(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t n = frame->args.size;
    if (frame->rets.size != 1 || num_elements((XLA_FFI_Buffer*)frame->rets.rets[0]) != n)
        return make_error(frame, "gradax_sum_squares: expected one float32[n] result");
    if (!all_float32_buffers(frame)) return make_error(frame, "gradax_sum_squares: every operand must be float32");
    float* out = data_of(frame->rets.rets[0]);
    if (n == 0) return NULL;
    size_t ptrs = (size_t)n * sizeof(float*);
    size_t partial_bytes = (size_t)MAX_PARTS * (size_t)n * sizeof(double);
    Job* job = new_job(n, sizeof(SumSq) + ptrs + 16 + partial_bytes);
    if (job == NULL) return make_error(frame, "gradax_sum_squares: out of memory");
    SumSq* s = (SumSq*)job->data;
    s->x = (float**)((char*)job->data + sizeof(SumSq));
    s->partial = (double*)(((uintptr_t)((char*)s->x + ptrs) + 15) & ~(uintptr_t)15);
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        s->x[i] = data_of(frame->args.args[i]);
        job->offset[i + 1] = job->offset[i] + num_elements((XLA_FFI_Buffer*)frame->args.args[i]);
    }
    job->parts = parts_for(frame, job->offset[n]);
    job->run = sumsq_run;
    run_job(frame, job);
    for (int64_t i = 0; i < n; ++i) {
        double total = 0.0;
        for (int k = 0; k < job->parts; ++k) total += s->partial[(size_t)k * (size_t)n + (size_t)i];
        out[i] = (float)total;
    }
    release(job);
    return NULL;
}
