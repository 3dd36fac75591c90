/* The CPU kernel of gradax.fused.cautious_adamw (gradax.cautious(gradax.adamw(...))), called from XLA through its
 * FFI (C API, xla/ffi/api/c_api.h).
 *
 * gradax_cautious_adamw_step: two phases over each group of leaves (consecutive leaves of at most GROUP_ELEMENTS
 * elements, or one larger leaf alone; plan_two_phase in fused_common.h), each split over XLA's thread pool:
 *   0. A read-only pass recomputes each element's AdamW update u from p, g, m, v and counts, per leaf, the
 *      elements where u g < 0 (the update descends; gradax.transforms._cautious.agrees with sign -1): an exact
 *      integer, whatever the order the parts add up in. Reads 16 bytes per parameter.
 *   1. Once the whole group is counted, the AdamW pass, in place, backward: m, v and
 *      p <- p + u * (keep ? d / (count + 1) : 0), with d the leaf's size. Reads 16 and writes 12 bytes per parameter.
 * A group of 8 MiB is still in the cache when phase 1 reads it, and phase 1 of a larger leaf starts on what phase 0
 * read last; only the rest comes from memory twice.
 * 44 bytes per float32 parameter in all, where XLA's passes (the count's read-only evaluation, then one kernel per
 * output) move 60. Operands:
 *   args[0]        float32[NCA] step scalars (enum CautiousScalar, fused_scalars.h)
 *   args[1]        float32[n] 1 where leaf i is decayed, 0 where the mask (or a weight decay of 0) leaves it
 *   args[2+i]      params leaf i,  args[2+n+i] grads leaf i,  args[2+2n+i] first moment i,
 *   args[2+3n+i]   second moment i (all float32)
 *   rets[i]        new params i, rets[n+i] new first moment i, rets[2n+i] new second moment i
 * The results alias the params and moments (input_output_aliases), so the update is in place.
 *
 * The arithmetic is that of XLA:CPU's code for cautious(adamw) + apply_updates, rounding for rounding: the AdamW
 * update as gradax_adamw_step computes it (bias corrections divided in a program of several leaves, multiplied by
 * their reciprocals in a program of one, XLA's merged division without Nesterov; see fused_adamw.c), the decay
 * contracted as fma(p, wd, u), then u * (-lr); the count from (u g) (-1) > 0; the rescale d / (float(count) + 1)
 * in float32, as cautious's `rescaled`; and the final sum contracted as fma(u, keep ? scale : 0, p), so a
 * disagreeing element adds u * 0 (NaN where u is not finite, as in XLA). On a CPU without FMA nothing is
 * contracted (the library is built with -ffp-contract=off; `fused` is a constant of each instruction-set variant).
 */
#include "fused_common.h"

#include <stdio.h> /* snprintf, for error messages */

/* enum CautiousScalar (CA_B1, ..., NCA): fused_scalars.h, generated from gradax._kernels._scalars.CAUTIOUS_ADAMW */

typedef struct Cautious Cautious;
struct Cautious {
    float s[NCA];
    float* decay;                /* [n]: decay flags */
    const int64_t* offset;       /* [n + 1]: the job's leaf offsets (leaf i has offset[i + 1] - offset[i] elements) */
    uint8_t* single;             /* [n]: 1 where the leaf has one element (see step_body) */
    _Atomic int64_t* count;      /* [n]: kept elements of each leaf, added up by the parts of job 1 */
    float **p, **g, **m, **v;    /* p, m, v updated in place (the results alias the operands) */
    void (*count_span)(Cautious* a, int64_t leaf, int64_t lo, int64_t hi); /* this CPU's variants */
    void (*step_span)(Cautious* a, int64_t leaf, int64_t lo, int64_t hi);
};

/* One element: the new moments (*mo, *vo) and the update after the learning rate, u (-lr). The flags are
 * constants of each loop (explicit unswitching). */
static inline __attribute__((always_inline)) float cautious_update(const float* s, float wd, float gi, float m_old,
                                                                   float v_old, float pi, float* mo, float* vo,
                                                                   const int fused, const int nesterov,
                                                                   const int divides, const int decay,
                                                                   const int second) {
    const float b1 = s[CA_B1], omb1 = s[CA_ONE_MINUS_B1], b2 = s[CA_B2], omb2 = s[CA_ONE_MINUS_B2];
    const float c1 = s[CA_C1], c1n = s[CA_C1_NEXT], c2 = s[CA_C2], eps = s[CA_EPS], eps_root = s[CA_EPS_ROOT];
    float mi = muladd(omb1, gi, b1 * m_old, fused);
    float vi = second ? muladd(b2, v_old, omb2 * (gi * gi), fused) : muladd(omb2, gi * gi, b2 * v_old, fused);
    float u;
    if (nesterov) {
        float mc = divides ? mi / c1n : mi * (1.0f / c1n), gc = divides ? gi / c1 : gi * (1.0f / c1);
        float mhat = muladd(b1, mc, omb1 * gc, fused);
        float root = divides ? sqrtf(vi / c2 + eps_root) : sqrtf(muladd(vi, 1.0f / c2, eps_root, fused));
        u = mhat / (root + eps);
    } else if (divides) {
        u = mi / (c1 * (sqrtf(vi / c2 + eps_root) + eps));
    } else {
        u = (mi * (1.0f / c1)) / (sqrtf(muladd(vi, 1.0f / c2, eps_root, fused)) + eps);
    }
    if (decay) u = muladd(pi, wd, u, fused);
    *mo = mi;
    *vo = vi;
    return u * s[CA_NEG_LR];
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Job 1: the count (read-only). An int32 sum per block of at most 2^20 elements (vectorized), added up in int64. */

#define COUNT_BLOCK (1 << 20)

/* Leaves are counted and stepped in groups of at most this many elements (8 MiB of p, g, m and v), so that the
 * step reads what the count just read from the cache, not from memory (plan_two_phase). */
#define GROUP_ELEMENTS (1 << 19)

static inline __attribute__((always_inline)) int64_t count_loop(const float* s, float wd, const float* restrict p,
                                                                const float* restrict g, const float* restrict m,
                                                                const float* restrict v, int64_t lo, int64_t hi,
                                                                const int fused, const int nesterov,
                                                                const int divides, const int decay) {
    int64_t total = 0;
    for (int64_t start = lo; start < hi; start += COUNT_BLOCK) {
        int64_t end = hi - start > COUNT_BLOCK ? start + COUNT_BLOCK : hi;
        int32_t kept = 0;
        for (int64_t i = start; i < end; ++i) {
            float mi, vi, gi = g[i];
            float u = cautious_update(s, wd, gi, m[i], v[i], p[i], &mi, &vi, fused, nesterov, divides, decay, 0);
            kept += -(u * gi) > 0.0f;
        }
        total += kept;
    }
    return total;
}

static inline __attribute__((always_inline)) void count_body(Cautious* a, int64_t leaf, int64_t lo, int64_t hi,
                                                             const int fused) {
    const float* s = a->s;
    const int nesterov = s[CA_NESTEROV] != 0.0f, divides = s[CA_DIVIDES] != 0.0f, decay = a->decay[leaf] != 0.0f;
    const float wd = s[CA_WEIGHT_DECAY];
    const float *p = a->p[leaf], *g = a->g[leaf], *m = a->m[leaf], *v = a->v[leaf];
    int64_t kept;
#define COUNT_LOOP(N, D, W) kept = count_loop(s, wd, p, g, m, v, lo, hi, fused, N, D, W)
    if (nesterov) {
        if (divides) { if (decay) COUNT_LOOP(1, 1, 1); else COUNT_LOOP(1, 1, 0); }
        else { if (decay) COUNT_LOOP(1, 0, 1); else COUNT_LOOP(1, 0, 0); }
    } else {
        if (divides) { if (decay) COUNT_LOOP(0, 1, 1); else COUNT_LOOP(0, 1, 0); }
        else { if (decay) COUNT_LOOP(0, 0, 1); else COUNT_LOOP(0, 0, 0); }
    }
#undef COUNT_LOOP
    atomic_fetch_add_explicit(&a->count[leaf], kept, memory_order_relaxed);
}

GRADAX_FMA_VARIANTS(count_span, count_body, (Cautious* a, int64_t leaf, int64_t lo, int64_t hi), (a, leaf, lo, hi))

/* ---------------------------------------------------------------------------------------------------------- */
/* Job 2: the AdamW pass, in place, with restrict pointers (the compiler vectorizes without runtime overlap checks,
 * which an exact alias of input and output would fail). */

static inline __attribute__((always_inline)) void step_loop(const float* s, float wd, float scale, float* restrict p,
                                                            const float* restrict g, float* restrict m,
                                                            float* restrict v, int64_t lo, int64_t hi,
                                                            const int fused, const int nesterov, const int divides,
                                                            const int decay, const int second) {
    for (int64_t i = lo; i < hi; ++i) {
        float mi, vi, gi = g[i], pi = p[i];
        float u = cautious_update(s, wd, gi, m[i], v[i], pi, &mi, &vi, fused, nesterov, divides, decay, second);
        float kept = -(u * gi) > 0.0f ? scale : 0.0f;
        m[i] = mi;
        v[i] = vi;
        p[i] = muladd(u, kept, pi, fused);
    }
}

static inline __attribute__((always_inline)) void step_body(Cautious* a, int64_t leaf, int64_t lo, int64_t hi,
                                                            const int fused) {
    const float* s = a->s;
    const int nesterov = s[CA_NESTEROV] != 0.0f, divides = s[CA_DIVIDES] != 0.0f, decay = a->decay[leaf] != 0.0f;
    /* cautious's rescale in float32: keep.size / (float(count) + 1), the count an int32 as count_true's (the
     * leaf's group is counted before any of its steps) */
    int32_t kept = (int32_t)atomic_load_explicit(&a->count[leaf], memory_order_relaxed);
    const float wd = s[CA_WEIGHT_DECAY], scale = (float)(a->offset[leaf + 1] - a->offset[leaf]) / ((float)kept + 1.0f);
    float *p = a->p[leaf], *m = a->m[leaf], *v = a->v[leaf];
    const float* g = a->g[leaf];
    if (a->single[leaf]) { /* XLA contracts the first product of the new v here (its code for one element) */
        step_loop(s, wd, scale, p, g, m, v, lo, hi, fused, nesterov, divides, decay, 0);
        return;
    }
#define STEP_LOOP(N, D, W) step_loop(s, wd, scale, p, g, m, v, lo, hi, fused, N, D, W, 1)
    if (nesterov) {
        if (divides) { if (decay) STEP_LOOP(1, 1, 1); else STEP_LOOP(1, 1, 0); }
        else { if (decay) STEP_LOOP(1, 0, 1); else STEP_LOOP(1, 0, 0); }
    } else {
        if (divides) { if (decay) STEP_LOOP(0, 1, 1); else STEP_LOOP(0, 1, 0); }
        else { if (decay) STEP_LOOP(0, 0, 1); else STEP_LOOP(0, 0, 0); }
    }
#undef STEP_LOOP
}

GRADAX_FMA_VARIANTS(step_span, step_body, (Cautious* a, int64_t leaf, int64_t lo, int64_t hi), (a, leaf, lo, hi))

/* ---------------------------------------------------------------------------------------------------------- */

/* Phase 0 counts; phase 1 (which starts once the leaf's group is counted) steps. */
static void cautious_run(Job* job, int item, int64_t leaf, int64_t lo, int64_t hi) {
    Cautious* a = (Cautious*)job->data;
    (job->items[item].phase == 0 ? a->count_span : a->step_span)(a, leaf, lo, hi);
}

/* an error of gradax_cautious_adamw_step (messages are static; the longest fits) */
static XLA_FFI_Error* cautious_error(XLA_FFI_CallFrame* frame, Job* job, const char* message) {
    char text[256];
    snprintf(text, sizeof(text), "gradax_cautious_adamw_step: %s", message);
    free(job);
    return make_error(frame, text);
}

static int f32_of(void* buffer, int64_t size) {
    return dtype_of(buffer) == XLA_FFI_DataType_F32 && num_elements((XLA_FFI_Buffer*)buffer) == size;
}

XLA_FFI_Error* gradax_cautious_adamw_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 2 || (nargs - 2) % 4 != 0 || nrets != 3 * ((nargs - 2) / 4))
        return make_error(frame, "gradax_cautious_adamw_step: expected 2 + 4n operands and 3n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i))
            return make_error(frame, "gradax_cautious_adamw_step: every operand must be a buffer");
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!f32_of(args[0], NCA) || !f32_of(args[1], n))
        return make_error(frame, "gradax_cautious_adamw_step: wrong number or dtype of scalars or decay flags");
    size_t leaves = (size_t)(n > 0 ? n : 1), ptrs = leaves * sizeof(float*);
    /* job 2 holds everything; job 1 (the count) a pointer to it, so a pool task of job 1 that starts late touches
     * only job 1, which it frees if it is the last holder (fused_common.h) */
    Job* job = new_job(n, sizeof(Cautious) + 4 * ptrs + leaves * sizeof(int64_t) + leaves * sizeof(float) + leaves);
    if (job == NULL) return make_error(frame, "gradax_cautious_adamw_step: out of memory");
    Cautious* a = (Cautious*)job->data;
    char* cursor = (char*)job->data + sizeof(Cautious);
    float*** slots[4] = {&a->p, &a->g, &a->m, &a->v};
    for (int k = 0; k < 4; ++k) *slots[k] = (float**)(cursor + (size_t)k * ptrs);
    a->count = (_Atomic int64_t*)(cursor + 4 * ptrs); /* zeroed by new_job */
    a->decay = (float*)(cursor + 4 * ptrs + leaves * sizeof(int64_t));
    a->single = (uint8_t*)(a->decay + leaves);
    a->offset = job->offset;
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->decay, data_of(args[1]), (size_t)n * sizeof(float));
    a->count_span = count_span_for_cpu();
    a->step_span = step_span_for_cpu();
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t size = num_elements((XLA_FFI_Buffer*)args[2 + i]);
        for (int k = 0; k < 4; ++k)
            if (!f32_of(args[2 + k * n + i], size))
                return cautious_error(frame, job, "the params, grads and moments of a leaf must be float32 of one size");
        for (int k = 0; k < 3; ++k)
            if (!f32_of(rets[k * n + i], size))
                return cautious_error(frame, job, "the results must be float32 of their operands' size");
        a->p[i] = in_place(data_of(args[2 + i]), data_of(rets[i]), size, sizeof(float));
        a->g[i] = data_of(args[2 + n + i]);
        a->m[i] = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), size, sizeof(float));
        a->v[i] = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), size, sizeof(float));
        job->offset[i + 1] = job->offset[i] + size;
        a->single[i] = size == 1;
    }
    job->run = cautious_run;
    if (plan_two_phase(frame, job, GROUP_ELEMENTS, 0) != 0) return cautious_error(frame, job, "out of memory");
    run_job(frame, job);
    release(job);
    return NULL;
}
