/* The CPU kernel of gradax.fused.mars (MARS-AdamW), called from XLA through its FFI (C API, xla/ffi/api/c_api.h).
 *
 * gradax_mars_step: two phases over each group of leaves (consecutive leaves of at most GROUP_ELEMENTS elements, or
 * one larger leaf alone; plan_two_phase in fused_common.h), each split over XLA's thread pool:
 *   0. A read-only pass over g and the previous gradient l sums the squares of each leaf's corrected gradient
 *      d = g + (-s)(l - g) (gradax.contrib._mars.mars_clip's expression): each square rounded to float32, as XLA's,
 *      the sum in float64, one partial sum per part and leaf, added up in part order (the same number whichever
 *      thread ran which part). Reads 8 bytes per parameter.
 *   1. Once the whole group is summed, the update, in place, backward: reads p, g, m, v, l and writes p, m, v and
 *      l = g (36 bytes per parameter), with the leaf's clipping factor k = 1 / max(1, |d| / max_norm) (NaN for a NaN
 *      norm, 0 for an infinite one; |d| itself for a leaf of one element, as XLA simplifies it).
 * A group of 8 MiB of g and l is still in the cache when phase 1 reads it; 44 bytes per float32 parameter at most,
 * where XLA's passes move 72. XLA's float32 reduction adds in its own order, which no kernel can follow, so the
 * factor can differ from update's by float32 rounding where a leaf is clipped. Operands:
 *   args[0]        float32[NM] step scalars (enum MarsScalar, fused_scalars.h)
 *   args[1]        float32[n] 1 where leaf i is decayed, 0 where the mask (or a weight decay of 0) leaves it
 *   args[2+i]      params leaf i,  args[2+n+i] grads leaf i,  args[2+2n+i] first moment i,
 *   args[2+3n+i]   second moment i,  args[2+4n+i] previous gradient i (all float32)
 *   rets[i]        new params i, rets[n+i] new first moment i, rets[2n+i] new second moment i, rets[3n+i] gradient i
 * The results alias the params and state operands (input_output_aliases), so the update is in place.
 *
 * The element-wise arithmetic is that of XLA:CPU's code for scale_by_mars, add_decayed_weights, the learning rate
 * and apply_updates, rounding for rounding:
 *   c = (g + s (g - l)) k;  m' = b1 m + (1-b1) c;  v' = b2 v + (1-b2) c c;
 *   u = (m' / (1-b1^t)) / (sqrt(v' / (1-b2^t)) + eps)   with the two reciprocals as scalars (scale_by_mars's code);
 *   u = u + wd p (decayed leaves);  p' = p + (-lr) u;  l' = g.
 * On a CPU with FMA, XLA:CPU contracts each multiply feeding an add into one fused multiply-add (tests/test_fused_mars.py
 * checks every bit): the kernel makes the same fmaf calls (the library is built with -ffp-contract=off, so it
 * contracts nothing else), and none on a CPU without FMA.
 */
#include "fused_common.h"

#include <stdio.h> /* snprintf, for error messages */

/* enum MarsScalar (M_B1, ..., NM): fused_scalars.h, generated from gradax._kernels._scalars.MARS */

/* Leaves are reduced and stepped in groups of at most this many elements (8 MiB of g and l), so that the step
 * reads the g and l the norm just read from the cache, not from memory (plan_two_phase). */
#define GROUP_ELEMENTS (1 << 20)

typedef struct Mars Mars;
struct Mars {
    float s[NM];
    float* decay;                  /* [n] */
    double* partial;               /* [job->slots] (job->scratch): each phase 0 part's sum of squares of each leaf */
    const int64_t* offset;         /* [n + 1]: the job's leaf offsets */
    float **p, **g, **m, **v, **l; /* p, m, v, l updated in place (the results alias the operands) */
    void (*norm_span)(Mars* a, int64_t slot, int64_t leaf, int64_t lo, int64_t hi); /* this CPU's variants */
    void (*step_span)(const Mars* a, float clip, int64_t leaf, int64_t lo, int64_t hi);
};

/* Phase 0: the sum of squares of the corrected gradient d = g + (-s)(l - g) over a span, as mars_clip writes it:
 * each square rounded to float32 (a square that overflows is inf, one that underflows is 0, as in XLA's sum), the
 * sum in float64, in blocks of 16 float32 lanes. */
static inline __attribute__((always_inline)) void norm_body(Mars* a, int64_t slot, int64_t leaf, int64_t lo,
                                                            int64_t hi, const int fused) {
    const float neg_scale = -a->s[M_SCALE];
    const float* restrict g = a->g[leaf];
    const float* restrict l = a->l[leaf];
    double lanes[16] = {0};
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16)
        for (int j = 0; j < 16; ++j) {
            float d = muladd(neg_scale, l[i + j] - g[i + j], g[i + j], fused);
            lanes[j] += (double)(d * d);
        }
    double sum = 0.0;
    if (a->offset[leaf + 1] - a->offset[leaf] == 1) { /* XLA simplifies the norm of one element to |d| */
        a->partial[slot] = (double)fabsf(muladd(neg_scale, l[0] - g[0], g[0], fused));
        return;
    }
    for (; i < hi; ++i) {
        float d = muladd(neg_scale, l[i] - g[i], g[i], fused);
        sum += (double)(d * d);
    }
    for (int j = 0; j < 16; ++j) sum += lanes[j];
    a->partial[slot] = sum;
}

GRADAX_FMA_VARIANTS(norm_span, norm_body, (Mars* a, int64_t slot, int64_t leaf, int64_t lo, int64_t hi),
                    (a, slot, leaf, lo, hi))

/* Phase 1: one span of one leaf, in place, with restrict pointers (the compiler vectorizes without runtime overlap
 * checks, which an exact alias of input and output would fail). `fused` is a constant in each instruction-set
 * variant; the decay is a constant of each loop (explicit unswitching). */
static inline __attribute__((always_inline)) void mars_loop(const Mars* a, float k, int64_t leaf, int64_t lo,
                                                            int64_t hi, const int fused, const int decay) {
    const float b1 = a->s[M_B1], omb1 = a->s[M_ONE_MINUS_B1], b2 = a->s[M_B2], omb2 = a->s[M_ONE_MINUS_B2];
    const float inv1 = a->s[M_INV_C1], inv2 = a->s[M_INV_C2], eps = a->s[M_EPS], scale = a->s[M_SCALE];
    const float wd = a->s[M_WEIGHT_DECAY], neg_lr = a->s[M_NEG_LR];
    float* restrict p = a->p[leaf];
    const float* restrict g = a->g[leaf];
    float* restrict m = a->m[leaf];
    float* restrict v = a->v[leaf];
    float* restrict l = a->l[leaf];
    for (int64_t i = lo; i < hi; ++i) {
        float gi = g[i], pi = p[i];
        float c = muladd(scale, gi - l[i], gi, fused) * k;
        float mi = muladd(b1, m[i], omb1 * c, fused);
        float vi = muladd(b2, v[i], (omb2 * c) * c, fused);
        float u = (mi * inv1) / (sqrtf(vi * inv2) + eps);
        if (decay) u = muladd(pi, wd, u, fused);
        m[i] = mi;
        v[i] = vi;
        l[i] = gi;
        p[i] = muladd(u, neg_lr, pi, fused);
    }
}

static inline __attribute__((always_inline)) void mars_body(const Mars* a, float clip, int64_t leaf, int64_t lo,
                                                            int64_t hi, const int fused) {
    if (a->decay[leaf] != 0.0f)
        mars_loop(a, clip, leaf, lo, hi, fused, 1);
    else
        mars_loop(a, clip, leaf, lo, hi, fused, 0);
}

/* The variants, picked at run time by the CPU's features (fused_common.h): AVX-512, AVX2 or AVX with FMA, and none
 * (SSE2: separate multiply and add). */
GRADAX_FMA_VARIANTS(step_span, mars_body, (const Mars* a, float clip, int64_t leaf, int64_t lo, int64_t hi),
                    (a, clip, leaf, lo, hi))

/* A leaf's clipping factor 1 / max(1, |d| / max_norm), from the partial sums of its group's phase 0 items, added
 * in item order (the same number whichever thread ran which item): NaN for a NaN norm, 0 for an infinite one. */
static float clip_of(const Job* job, const Mars* a, int64_t item, int64_t leaf) {
    double sum = 0.0;
    const Item* read = &job->items[job->items[item].reads];
    for (; read->phase == 0 && read->group == job->items[item].group; ++read)
        if (leaf >= read->first_leaf && job->offset[leaf] < read->end) /* the part reads this leaf */
            sum += a->partial[read->slot + (leaf - read->first_leaf)];
    float norm = job->offset[leaf + 1] - job->offset[leaf] == 1 ? (float)sum : sqrtf((float)sum);
    float ratio = norm / a->s[M_MAX_NORM];
    return 1.0f / (ratio > 1.0f || ratio != ratio ? ratio : 1.0f);
}

static void mars_run(Job* job, int item, int64_t leaf, int64_t lo, int64_t hi) {
    Mars* a = (Mars*)job->data;
    const Item* it = &job->items[item];
    if (it->phase == 0)
        a->norm_span(a, it->slot + (leaf - it->first_leaf), leaf, lo, hi);
    else
        a->step_span(a, clip_of(job, a, item, leaf), leaf, lo, hi);
}

/* an error of gradax_mars_step (messages are static; the longest fits) */
static XLA_FFI_Error* mars_error(XLA_FFI_CallFrame* frame, Job* job, const char* message) {
    char text[256];
    snprintf(text, sizeof(text), "gradax_mars_step: %s", message);
    free(job);
    return make_error(frame, text);
}

static int is_f32_of(void* buffer, int64_t size) {
    return dtype_of(buffer) == XLA_FFI_DataType_F32 && num_elements((XLA_FFI_Buffer*)buffer) == size;
}

XLA_FFI_Error* gradax_mars_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 2 || (nargs - 2) % 5 != 0 || nrets != 4 * ((nargs - 2) / 5))
        return make_error(frame, "gradax_mars_step: expected 2 + 5n operands and 4n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_mars_step: every operand must be a buffer");
    int64_t n = (nargs - 2) / 5;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!is_f32_of(args[0], NM) || !is_f32_of(args[1], n))
        return make_error(frame, "gradax_mars_step: wrong number or dtype of scalars or decay flags");
    size_t leaves = (size_t)(n > 0 ? n : 1), ptrs = leaves * sizeof(float*);
    Job* job = new_job(n, sizeof(Mars) + 5 * ptrs + leaves * sizeof(float));
    if (job == NULL) return make_error(frame, "gradax_mars_step: out of memory");
    Mars* a = (Mars*)job->data;
    char* cursor = (char*)job->data + sizeof(Mars);
    float*** slots[5] = {&a->p, &a->g, &a->m, &a->v, &a->l};
    for (int k = 0; k < 5; ++k) *slots[k] = (float**)(cursor + (size_t)k * ptrs);
    a->decay = (float*)(cursor + 5 * ptrs);
    a->offset = job->offset;
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->decay, data_of(args[1]), (size_t)n * sizeof(float));
    a->norm_span = norm_span_for_cpu();
    a->step_span = step_span_for_cpu();
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t size = num_elements((XLA_FFI_Buffer*)args[2 + i]);
        for (int k = 0; k < 5; ++k)
            if (!is_f32_of(args[2 + k * n + i], size))
                return mars_error(frame, job, "the params, grads and state of a leaf must be float32 of one size");
        for (int k = 0; k < 4; ++k)
            if (!is_f32_of(rets[k * n + i], size))
                return mars_error(frame, job, "the results must be float32 of their operands' size");
        a->p[i] = in_place(data_of(args[2 + i]), data_of(rets[i]), size, sizeof(float));
        a->g[i] = data_of(args[2 + n + i]);
        a->m[i] = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), size, sizeof(float));
        a->v[i] = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), size, sizeof(float));
        a->l[i] = in_place(data_of(args[2 + 4 * n + i]), data_of(rets[3 * n + i]), size, sizeof(float));
        job->offset[i + 1] = job->offset[i] + size;
    }
    job->run = mars_run;
    if (plan_two_phase(frame, job, GROUP_ELEMENTS, sizeof(double)) != 0)
        return mars_error(frame, job, "out of memory");
    a->partial = (double*)job->scratch;
    run_job(frame, job);
    release(job);
    return NULL;
}
