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
 * The job that splits the work over XLA's thread pool is in fused_common.h.
 */
#include "fused_common.h"

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
        a->p[i] = in_place(data_of(args[2 + i]), data_of(rets[i]), size, sizeof(float));
        a->g[i] = data_of(args[2 + n + i]);
        a->m[i] = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), size, sizeof(float));
        a->v[i] = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), size, sizeof(float));
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
