/* The single-pass CPU kernel of gradax.fused.mars (MARS-AdamW), called from XLA through its FFI (C API,
 * xla/ffi/api/c_api.h).
 *
 * gradax_mars_step: one pass over every leaf reads p, g, m, v and the previous gradient l, and writes p, m, v and
 * l = g in place (36 bytes per float32 parameter; XLA's one-kernel-per-output passes move 64, plus the norm). The
 * per-leaf clipping factor of the corrected gradient needs the whole leaf first: XLA computes it before the call,
 * with the very code of scale_by_mars (gradax.contrib._mars.mars_clip: one fused reduction reading g and l), so the
 * kernel sees the same factor, bit for bit. Operands:
 *   args[0]        float32[NM] step scalars (enum MarsScalar, fused_scalars.h)
 *   args[1]        float32[n] clipping factor of leaf i, 1 / max(1, |c_i| / max_norm)
 *   args[2]        float32[n] 1 where leaf i is decayed, 0 where the mask (or a weight decay of 0) leaves it
 *   args[3+i]      params leaf i,  args[3+n+i] grads leaf i,  args[3+2n+i] first moment i,
 *   args[3+3n+i]   second moment i,  args[3+4n+i] previous gradient i (all float32)
 *   rets[i]        new params i, rets[n+i] new first moment i, rets[2n+i] new second moment i, rets[3n+i] gradient i
 * The results alias the params and state operands (input_output_aliases), so the update is in place.
 *
 * The arithmetic is that of XLA:CPU's code for scale_by_mars, add_decayed_weights, the learning rate and
 * apply_updates, rounding for rounding:
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

typedef struct Mars Mars;
struct Mars {
    float s[NM];
    float *clip, *decay;         /* [n] */
    float **p, **g, **m, **v, **l; /* p, m, v, l updated in place (the results alias the operands) */
    void (*span)(const Mars* a, int64_t leaf, int64_t lo, int64_t hi); /* this CPU's variant (mars_span_for_cpu) */
};

/* One span of one leaf, in place, with restrict pointers (the compiler vectorizes without runtime overlap checks,
 * which an exact alias of input and output would fail). `fused` is a constant in each instruction-set variant; the
 * decay is a constant of each loop (explicit unswitching). */
static inline __attribute__((always_inline)) void mars_loop(const Mars* a, int64_t leaf, int64_t lo, int64_t hi,
                                                            const int fused, const int decay) {
    const float b1 = a->s[M_B1], omb1 = a->s[M_ONE_MINUS_B1], b2 = a->s[M_B2], omb2 = a->s[M_ONE_MINUS_B2];
    const float inv1 = a->s[M_INV_C1], inv2 = a->s[M_INV_C2], eps = a->s[M_EPS], scale = a->s[M_SCALE];
    const float wd = a->s[M_WEIGHT_DECAY], neg_lr = a->s[M_NEG_LR], k = a->clip[leaf];
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

static inline __attribute__((always_inline)) void mars_body(const Mars* a, int64_t leaf, int64_t lo, int64_t hi,
                                                            const int fused) {
    if (a->decay[leaf] != 0.0f)
        mars_loop(a, leaf, lo, hi, fused, 1);
    else
        mars_loop(a, leaf, lo, hi, fused, 0);
}

/* The variants, picked at run time by the CPU's features (fused_common.h): AVX-512, AVX2 or AVX with FMA, and none
 * (SSE2: separate multiply and add). */
GRADAX_FMA_VARIANTS(mars_span, mars_body, (const Mars* a, int64_t leaf, int64_t lo, int64_t hi), (a, leaf, lo, hi))

static void mars_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    Mars* a = (Mars*)job->data;
    a->span(a, leaf, lo, hi);
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
    if (nargs < 3 || (nargs - 3) % 5 != 0 || nrets != 4 * ((nargs - 3) / 5))
        return make_error(frame, "gradax_mars_step: expected 3 + 5n operands and 4n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_mars_step: every operand must be a buffer");
    int64_t n = (nargs - 3) / 5;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!is_f32_of(args[0], NM) || !is_f32_of(args[1], n) || !is_f32_of(args[2], n))
        return make_error(frame, "gradax_mars_step: wrong number or dtype of scalars, clipping factors or flags");
    size_t leaves = (size_t)(n > 0 ? n : 1), ptrs = leaves * sizeof(float*);
    Job* job = new_job(n, sizeof(Mars) + 5 * ptrs + 2 * leaves * sizeof(float));
    if (job == NULL) return make_error(frame, "gradax_mars_step: out of memory");
    Mars* a = (Mars*)job->data;
    char* cursor = (char*)job->data + sizeof(Mars);
    float*** slots[5] = {&a->p, &a->g, &a->m, &a->v, &a->l};
    for (int k = 0; k < 5; ++k) *slots[k] = (float**)(cursor + (size_t)k * ptrs);
    a->clip = (float*)(cursor + 5 * ptrs);
    a->decay = a->clip + leaves;
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->clip, data_of(args[1]), (size_t)n * sizeof(float));
    memcpy(a->decay, data_of(args[2]), (size_t)n * sizeof(float));
    a->span = mars_span_for_cpu();
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t size = num_elements((XLA_FFI_Buffer*)args[3 + i]);
        for (int k = 0; k < 5; ++k)
            if (!is_f32_of(args[3 + k * n + i], size))
                return mars_error(frame, job, "the params, grads and state of a leaf must be float32 of one size");
        for (int k = 0; k < 4; ++k)
            if (!is_f32_of(rets[k * n + i], size))
                return mars_error(frame, job, "the results must be float32 of their operands' size");
        a->p[i] = in_place(data_of(args[3 + i]), data_of(rets[i]), size, sizeof(float));
        a->g[i] = data_of(args[3 + n + i]);
        a->m[i] = in_place(data_of(args[3 + 2 * n + i]), data_of(rets[n + i]), size, sizeof(float));
        a->v[i] = in_place(data_of(args[3 + 3 * n + i]), data_of(rets[2 * n + i]), size, sizeof(float));
        a->l[i] = in_place(data_of(args[3 + 4 * n + i]), data_of(rets[3 * n + i]), size, sizeof(float));
        job->offset[i + 1] = job->offset[i] + size;
    }
    job->parts = parts_for(frame, job->offset[n]);
    job->run = mars_run;
    run_job(frame, job);
    release(job);
    return NULL;
}
