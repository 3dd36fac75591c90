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
 * The work of a call is split into contiguous ranges of the concatenated leaves, one per thread, so a tree of
 * thousands of small leaves costs one call and a big leaf uses every thread.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#define MIN_ELEMENTS_PER_THREAD (1 << 16)

static XLA_FFI_Error* make_error(const XLA_FFI_CallFrame* frame, const char* message) {
    XLA_FFI_Error_Create_Args args;
    memset(&args, 0, sizeof(args));
    args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
    args.message = message;
    args.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
    return frame->api->XLA_FFI_Error_Create(&args);
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

static int num_threads(int64_t total) {
    static int configured = 0;
    if (configured == 0) {
        const char* env = getenv("GRADAX_KERNEL_THREADS");
        long t = env ? strtol(env, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
        configured = t < 1 ? 1 : (t > 256 ? 256 : (int)t);
    }
    int64_t by_size = total / MIN_ELEMENTS_PER_THREAD;
    if (by_size < 1) by_size = 1;
    return by_size < configured ? (int)by_size : configured;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Work split: a range [begin, end) of the leaves laid end to end. */

typedef struct {
    int64_t n;              /* number of leaves */
    const int64_t* offset;  /* offset[i]: start of leaf i in the concatenation; offset[n]: total */
    int64_t begin, end;
    void* ctx;
    void (*run)(void* ctx, int64_t leaf, int64_t lo, int64_t hi);
} Range;

static void* run_range(void* arg) {
    Range* r = (Range*)arg;
    /* first leaf that ends after begin */
    int64_t lo = 0, hi = r->n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (r->offset[mid + 1] <= r->begin) lo = mid + 1; else hi = mid;
    }
    for (int64_t leaf = lo; leaf < r->n && r->offset[leaf] < r->end; ++leaf) {
        int64_t a = r->begin > r->offset[leaf] ? r->begin - r->offset[leaf] : 0;
        int64_t b = (r->end < r->offset[leaf + 1] ? r->end : r->offset[leaf + 1]) - r->offset[leaf];
        if (b > a) r->run(r->ctx, leaf, a, b);
    }
    return NULL;
}

static void parallel_over_leaves(int64_t n, const int64_t* offset, void* ctx,
                                 void (*run)(void*, int64_t, int64_t, int64_t), Range* ranges) {
    int64_t total = offset[n];
    int t = num_threads(total);
    pthread_t threads[256];
    int started[256];
    for (int k = 0; k < t; ++k) {
        /* split on multiples of 16 elements so threads do not share cache lines */
        int64_t b = (total * k / t) & ~(int64_t)15, e = k + 1 == t ? total : (total * (k + 1) / t) & ~(int64_t)15;
        ranges[k] = (Range){n, offset, b, e, ctx, run};
    }
    for (int k = 1; k < t; ++k) started[k] = pthread_create(&threads[k], NULL, run_range, &ranges[k]) == 0;
    run_range(&ranges[0]);
    for (int k = 1; k < t; ++k) {
        if (started[k]) pthread_join(threads[k], NULL); else run_range(&ranges[k]);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* AdamW */

typedef struct {
    float s[NS];
    const float* wd;
    float **p, **g, **m, **v;  /* updated in place (the results alias the operands) */
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

static void adamw_run(void* ctx, int64_t leaf, int64_t lo, int64_t hi) {
    AdamW* a = (AdamW*)ctx;
    adamw_span(a->s, a->wd[leaf], a->p[leaf], a->g[leaf], a->m[leaf], a->v[leaf], lo, hi);
}

static float* data_of(void* buffer) { return (float*)((XLA_FFI_Buffer*)buffer)->data; }

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
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    for (int64_t i = 0; i < nargs; ++i) {
        XLA_FFI_Buffer* b = (XLA_FFI_Buffer*)args[i];
        if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER || b->dtype != XLA_FFI_DataType_F32)
            return make_error(frame, "gradax_adamw_step: every operand must be a float32 buffer");
    }
    if (num_elements((XLA_FFI_Buffer*)args[0]) != NS || num_elements((XLA_FFI_Buffer*)args[1]) != n)
        return make_error(frame, "gradax_adamw_step: wrong number of scalars or weight decays");
    AdamW a;
    memcpy(a.s, data_of(args[0]), sizeof(a.s));
    a.wd = data_of(args[1]);
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float*);
    int64_t* offset = (int64_t*)malloc((size_t)(n + 1) * sizeof(int64_t));
    float** ptrs = (float**)malloc(4 * bytes);
    Range* ranges = (Range*)malloc(256 * sizeof(Range));
    if (offset == NULL || ptrs == NULL || ranges == NULL) {
        free(offset); free(ptrs); free(ranges);
        return make_error(frame, "gradax_adamw_step: out of memory");
    }
    a.p = ptrs; a.g = ptrs + n; a.m = ptrs + 2 * n; a.v = ptrs + 3 * n;
    offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t size = num_elements((XLA_FFI_Buffer*)args[2 + i]);
        for (int k = 1; k < 4; ++k) {
            if (num_elements((XLA_FFI_Buffer*)args[2 + k * n + i]) != size) {
                free(offset); free(ptrs); free(ranges);
                return make_error(frame, "gradax_adamw_step: params, grads and moments differ in size");
            }
        }
        /* XLA passes an aliased result in its operand's buffer; copy first if it ever does not */
        a.p[i] = in_place(data_of(args[2 + i]), data_of(rets[i]), size);
        a.g[i] = data_of(args[2 + n + i]);
        a.m[i] = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), size);
        a.v[i] = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), size);
        offset[i + 1] = offset[i] + size;
    }
    parallel_over_leaves(n, offset, &a, adamw_run, ranges);
    free(offset); free(ptrs); free(ranges);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Sum of squares per leaf */

typedef struct {
    float** x;
    double* partial;  /* [threads][n]: each range adds into its own row */
    int64_t n;
    Range* ranges;
} SumSq;

__attribute__((target_clones("avx512f", "avx2", "default")))
static double sum_squares_span(const float* x, int64_t lo, int64_t hi) {
    /* 16 float32 partial sums (vectorizable), combined in double */
    float acc[16] = {0};
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        for (int k = 0; k < 16; ++k) acc[k] += x[i + k] * x[i + k];
    double total = 0.0;
    for (int k = 0; k < 16; ++k) total += acc[k];
    for (; i < hi; ++i) total += (double)x[i] * x[i];
    return total;
}

static __thread double* thread_partial;

static void sumsq_run(void* ctx, int64_t leaf, int64_t lo, int64_t hi) {
    SumSq* s = (SumSq*)ctx;
    thread_partial[leaf] += sum_squares_span(s->x[leaf], lo, hi);
}

typedef struct {
    Range range;
    double* partial;
} SumSqRange;

static void* sumsq_thread(void* arg) {
    SumSqRange* r = (SumSqRange*)arg;
    thread_partial = r->partial;
    return run_range(&r->range);
}

XLA_FFI_Error* gradax_sum_squares(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t n = frame->args.size;
    if (frame->rets.size != 1 || num_elements((XLA_FFI_Buffer*)frame->rets.rets[0]) != n)
        return make_error(frame, "gradax_sum_squares: expected one float32[n] result");
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer* b = (XLA_FFI_Buffer*)frame->args.args[i];
        if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER || b->dtype != XLA_FFI_DataType_F32)
            return make_error(frame, "gradax_sum_squares: every operand must be a float32 buffer");
    }
    float* out = data_of(frame->rets.rets[0]);
    if (n == 0) return NULL;
    int64_t* offset = (int64_t*)malloc((size_t)(n + 1) * sizeof(int64_t));
    float** x = (float**)malloc((size_t)n * sizeof(float*));
    if (offset == NULL || x == NULL) {
        free(offset); free(x);
        return make_error(frame, "gradax_sum_squares: out of memory");
    }
    offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = data_of(frame->args.args[i]);
        offset[i + 1] = offset[i] + num_elements((XLA_FFI_Buffer*)frame->args.args[i]);
    }
    int t = num_threads(offset[n]);
    double* partial = (double*)calloc((size_t)t * (size_t)n, sizeof(double));
    SumSqRange* ranges = (SumSqRange*)malloc((size_t)t * sizeof(SumSqRange));
    if (partial == NULL || ranges == NULL) {
        free(offset); free(x); free(partial); free(ranges);
        return make_error(frame, "gradax_sum_squares: out of memory");
    }
    SumSq s = {x, partial, n, NULL};
    pthread_t threads[256];
    int started[256];
    int64_t total = offset[n];
    for (int k = 0; k < t; ++k) {
        int64_t b = (total * k / t) & ~(int64_t)15, e = k + 1 == t ? total : (total * (k + 1) / t) & ~(int64_t)15;
        ranges[k].range = (Range){n, offset, b, e, &s, sumsq_run};
        ranges[k].partial = partial + (size_t)k * (size_t)n;
    }
    for (int k = 1; k < t; ++k) started[k] = pthread_create(&threads[k], NULL, sumsq_thread, &ranges[k]) == 0;
    sumsq_thread(&ranges[0]);
    for (int k = 1; k < t; ++k) {
        if (started[k]) pthread_join(threads[k], NULL); else sumsq_thread(&ranges[k]);
    }
    for (int64_t i = 0; i < n; ++i) {
        double total_i = 0.0;
        for (int k = 0; k < t; ++k) total_i += partial[(size_t)k * (size_t)n + (size_t)i];
        out[i] = (float)total_i;
    }
    free(offset); free(x); free(partial); free(ranges);
    return NULL;
}
