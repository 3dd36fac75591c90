/* Single-pass CPU AdamW kernels for gradax.fused, called from XLA through its FFI (C API, xla/ffi/api/c_api.h).
 *
 * gradax_adamw_step: one pass over every leaf of the tree reads p, g, m, v and writes p, m, v in place: 28 bytes per
 * parameter for float32 params and grads (XLA:CPU's one-kernel-per-output fusions move 40), 22 for bfloat16 params
 * and grads (the moments are float32). Operands:
 *   args[0]        float32[NS] step scalars (enum Scalar, fused_scalars.h)
 *   args[1]        float32[n] weight decay per leaf (0 where the mask leaves a leaf undecayed)
 *   args[2+i]      params leaf i,     args[2+n+i] grads leaf i (float32 or bfloat16, alike),
 *   args[2+2n+i]   first moment i,    args[2+3n+i] second moment i (float32)
 *   rets[i]        new params i, rets[n+i] new first moment i, rets[2n+i] new second moment i
 * The results alias the params and moments operands (input_output_aliases), so the update is in place.
 *
 * gradax_adamw_flat_step: the same step where the moments are slices of two flat vectors (see below).
 *
 * gradax_adamw8_step: the same step with block-wise 8-bit moments (see its operands below): 16 bytes per parameter.
 *
 * The job that splits the work over XLA's thread pool is in fused_common.h.
 */
#include "fused_common.h"

/* enum Scalar (S_B1, ..., NS): fused_scalars.h, generated from gradax._kernels._scalars.ADAMW */

/* ---------------------------------------------------------------------------------------------------------- */
/* AdamW */

/* In place, with restrict pointers: the compiler vectorizes without runtime overlap checks (an exact alias of
 * input and output would fail those checks and fall back to the scalar loop).
 *
 * Rounding for rounding what XLA:CPU compiles for scale_by_adam, add_decayed_weights, the learning rate and
 * apply_updates (measured with jaxlib 0.10.2; see docs/differences.md). On a CPU with FMA, XLA contracts each
 * multiply feeding an add into one fused multiply-add: m' = fma(1-b1, g, b1 m), v' = fma(1-b2, g^2, b2 v), the
 * decay fma(p, wd, u), the step fma(u, -lr, p), and Nesterov's b1 (m'/c1') + (1-b1) (g/c1) with its first product;
 * after clip_by_global_norm, the second product of v' and of Nesterov's sum instead (S_SECOND_PRODUCTS). XLA
 * multiplies by the reciprocals of the bias corrections c1, c2 in a program of one leaf, and divides by them in a
 * program of several (S_DIVIDES), where without Nesterov it merges (m'/c1) / (sqrt(v'/c2) + eps) into
 * m' / (c1 (sqrt(v'/c2) + eps)). The flags are constants of each loop below (explicit unswitching). */
static inline __attribute__((always_inline)) void adamw_loop(const float* s, float wd, float* restrict p,
                                                             const float* restrict g, float* restrict m,
                                                             float* restrict v, int64_t lo, int64_t hi,
                                                             const int fused, const int nesterov, const int divides,
                                                             const int second) {
    const float b1 = s[S_B1], omb1 = s[S_ONE_MINUS_B1], b2 = s[S_B2], omb2 = s[S_ONE_MINUS_B2];
    const float c1 = s[S_C1], c1n = s[S_C1_NEXT], c2 = s[S_C2], ic1 = 1.0f / c1, ic1n = 1.0f / c1n, ic2 = 1.0f / c2;
    const float eps = s[S_EPS], eps_root = s[S_EPS_ROOT], neg_lr = s[S_NEG_LR], scale = s[S_GRAD_SCALE];
    const int decay = wd != 0.0f;
    for (int64_t i = lo; i < hi; ++i) {
        float gi = g[i] * scale;
        float mi = muladd(omb1, gi, b1 * m[i], fused);
        float vi = second ? muladd(b2, v[i], omb2 * (gi * gi), fused) : muladd(omb2, gi * gi, b2 * v[i], fused);
        float u;
        if (nesterov) {
            float mc = divides ? mi / c1n : mi * ic1n, gc = divides ? gi / c1 : gi * ic1;
            float mhat = second ? muladd(omb1, gc, b1 * mc, fused) : muladd(b1, mc, omb1 * gc, fused);
            float root = divides ? sqrtf(vi / c2 + eps_root) : sqrtf(muladd(vi, ic2, eps_root, fused));
            u = mhat / (root + eps);
        } else if (divides) {
            u = mi / (c1 * (sqrtf(vi / c2 + eps_root) + eps));
        } else {
            u = (mi * ic1) / (sqrtf(muladd(vi, ic2, eps_root, fused)) + eps);
        }
        float pi = p[i];
        if (decay) u = muladd(pi, wd, u, fused);
        m[i] = mi;
        v[i] = vi;
        p[i] = muladd(u, neg_lr, pi, fused);
    }
}

static inline __attribute__((always_inline)) void adamw_body(const float* s, float wd, float* restrict p,
                                                             const float* restrict g, float* restrict m,
                                                             float* restrict v, int64_t lo, int64_t hi,
                                                             const int fused) {
    const int nesterov = s[S_NESTEROV] != 0.0f, divides = s[S_DIVIDES] != 0.0f;
    const int second = s[S_SECOND_PRODUCTS] != 0.0f;
#define ADAMW_LOOP(N, D, S) adamw_loop(s, wd, p, g, m, v, lo, hi, fused, N, D, S)
    if (nesterov) {
        if (divides) { if (second) ADAMW_LOOP(1, 1, 1); else ADAMW_LOOP(1, 1, 0); }
        else { if (second) ADAMW_LOOP(1, 0, 1); else ADAMW_LOOP(1, 0, 0); }
    } else {
        if (divides) { if (second) ADAMW_LOOP(0, 1, 1); else ADAMW_LOOP(0, 1, 0); }
        else { if (second) ADAMW_LOOP(0, 0, 1); else ADAMW_LOOP(0, 0, 0); }
    }
#undef ADAMW_LOOP
}

GRADAX_FMA_VARIANTS(adamw_span, adamw_body,
                    (const float* s, float wd, float* restrict p, const float* restrict g, float* restrict m,
                     float* restrict v, int64_t lo, int64_t hi),
                    (s, wd, p, g, m, v, lo, hi))

typedef struct {
    float s[NS];
    float* wd;
    uint8_t* bf16;            /* 1 where the leaf's params and grads are bfloat16 */
    void **p, **g;            /* params updated in place (the results alias the operands) */
    float **m, **v;           /* likewise the moments (always float32) */
    adamw_span_fn span;       /* the float32 loop for this CPU */
} AdamW;

/* The step's scalars for the bfloat16 and 8-bit loops, which multiply by the reciprocals of the bias corrections
 * (as XLA does) and contract nothing (within an ulp of update + apply where XLA contracts): ic1, ic1n, ic2 and isc2
 * are 1/c1, 1/c1n, 1/c2 and 1/sqrt(c2). */
typedef struct {
    float b1, omb1, b2, omb2, ic1, ic1n, ic2, isc2, eps, eps_root, neg_lr, scale;
} AdamConsts;

static inline AdamConsts adam_consts(const float* s) {
    AdamConsts k = {s[S_B1], s[S_ONE_MINUS_B1], s[S_B2], s[S_ONE_MINUS_B2], 1.0f / s[S_C1], 1.0f / s[S_C1_NEXT],
                    1.0f / s[S_C2], 1.0f / sqrtf(s[S_C2]), s[S_EPS], s[S_EPS_ROOT], s[S_NEG_LR],
                    s[S_GRAD_SCALE]};
    return k;
}

/* One element's new moments (*mi, *vi) from its gradient and old moments; returns the bias-corrected first moment
 * (Nesterov's look-ahead when `nesterov`). */
static inline __attribute__((always_inline)) float adam_moments(const AdamConsts* k, float gi, float m_old,
                                                                float v_old, const int nesterov, float* mi,
                                                                float* vi) {
    *mi = k->omb1 * gi + k->b1 * m_old;
    *vi = k->omb2 * (gi * gi) + k->b2 * v_old;
    return nesterov ? k->b1 * (*mi * k->ic1n) + k->omb1 * (gi * k->ic1) : *mi * k->ic1;
}

/* bfloat16 params and grads, float32 moments. Each transformation of the chain hands the next one a bfloat16
 * update (scale_by_adam, add_decayed_weights, the learning rate, then the sum with the params), so the update is
 * rounded to bfloat16 at each of those points, as update + apply_updates does; the arithmetic between them is
 * float32. A clipped gradient is rounded to bfloat16 too (clip_by_global_norm returns the grads' dtype). */
static inline __attribute__((always_inline)) void adamw_bf16_body(
    const float* s, float wd, uint16_t* restrict p, const uint16_t* restrict g, float* restrict m,
    float* restrict v, int64_t lo, int64_t hi, const int nesterov, const int decay, const int clip) {
    const AdamConsts k = adam_consts(s);
    for (int64_t i = lo; i < hi; ++i) {
        float gi = bf16_to_f32(g[i]), mi, vi;
        if (clip) gi = round_bf16(gi * k.scale); /* clip_by_global_norm hands on bfloat16 grads */
        float mhat = adam_moments(&k, gi, m[i], v[i], nesterov, &mi, &vi);
        float u = round_bf16(mhat / (sqrtf(vi * k.ic2 + k.eps_root) + k.eps));
        float pi = bf16_to_f32(p[i]);
        if (decay) u = round_bf16(u + wd * pi);
        u = round_bf16(u * k.neg_lr);
        m[i] = mi;
        v[i] = vi;
        p[i] = f32_to_bf16(pi + u);
    }
}

/* Nesterov, decay and clipping are constants of each loop (an if-converted select would compute both sides) */
GRADAX_CLONES
static void adamw_span_bf16(const float* s, float wd, uint16_t* restrict p, const uint16_t* restrict g,
                            float* restrict m, float* restrict v, int64_t lo, int64_t hi) {
    const int nesterov = s[S_NESTEROV] != 0.0f, decay = wd != 0.0f, clip = s[S_GRAD_SCALE] != 1.0f;
#define ADAMW_BF16_BODY(N, D, C) adamw_bf16_body(s, wd, p, g, m, v, lo, hi, N, D, C)
    if (clip) {
        if (nesterov && decay) ADAMW_BF16_BODY(1, 1, 1);
        else if (nesterov) ADAMW_BF16_BODY(1, 0, 1);
        else if (decay) ADAMW_BF16_BODY(0, 1, 1);
        else ADAMW_BF16_BODY(0, 0, 1);
    } else {
        if (nesterov && decay) ADAMW_BF16_BODY(1, 1, 0);
        else if (nesterov) ADAMW_BF16_BODY(1, 0, 0);
        else if (decay) ADAMW_BF16_BODY(0, 1, 0);
        else ADAMW_BF16_BODY(0, 0, 0);
    }
#undef ADAMW_BF16_BODY
}

static void adamw_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    AdamW* a = (AdamW*)job->data;
    if (a->bf16[leaf])
        adamw_span_bf16(a->s, a->wd[leaf], (uint16_t*)a->p[leaf], (const uint16_t*)a->g[leaf], a->m[leaf],
                        a->v[leaf], lo, hi);
    else
        a->span(a->s, a->wd[leaf], (float*)a->p[leaf], (const float*)a->g[leaf], a->m[leaf], a->v[leaf], lo, hi);
}

/* Whether args[0] and args[1] are the float32 scalars and the n weight decays. */
static int adamw_head(void** args, int64_t n) {
    return dtype_of(args[0]) == XLA_FFI_DataType_F32 && num_elements((XLA_FFI_Buffer*)args[0]) == NS &&
           dtype_of(args[1]) == XLA_FFI_DataType_F32 && num_elements((XLA_FFI_Buffer*)args[1]) == n;
}

/* A job for n leaves with the scalars and weight decays of args[0] and args[1]; the leaves are set by adamw_leaf. */
static Job* adamw_job(int64_t n, void** args) {
    size_t ptrs = (size_t)(n > 0 ? n : 1) * sizeof(void*);
    size_t wd_bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
    Job* job = new_job(n, sizeof(AdamW) + 4 * ptrs + wd_bytes + (size_t)(n > 0 ? n : 1));
    if (job == NULL) return NULL;
    AdamW* a = (AdamW*)job->data;
    char* cursor = (char*)job->data + sizeof(AdamW);
    a->p = (void**)cursor; a->g = (void**)(cursor + ptrs);
    a->m = (float**)(cursor + 2 * ptrs); a->v = (float**)(cursor + 3 * ptrs);
    a->wd = (float*)(cursor + 4 * ptrs);
    a->bf16 = (uint8_t*)(cursor + 4 * ptrs + wd_bytes);
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->wd, data_of(args[1]), (size_t)n * sizeof(float));
    a->span = adamw_span_for_cpu();
    job->offset[0] = 0;
    return job;
}

/* Leaf i's params (updated in ret, in place) and grads, and its end in job->offset; an error message or NULL. */
static const char* adamw_leaf(Job* job, int64_t i, void* p, void* g, void* ret) {
    AdamW* a = (AdamW*)job->data;
    int64_t size = num_elements((XLA_FFI_Buffer*)p);
    XLA_FFI_DataType t = dtype_of(p);
    if ((t != XLA_FFI_DataType_F32 && t != XLA_FFI_DataType_BF16) || dtype_of(g) != t)
        return "gradax_adamw_step: params and grads must be float32 or bfloat16 (alike), the moments float32";
    if (num_elements((XLA_FFI_Buffer*)g) != size) return "gradax_adamw_step: params and grads differ in size";
    size_t item = t == XLA_FFI_DataType_BF16 ? sizeof(uint16_t) : sizeof(float);
    a->bf16[i] = t == XLA_FFI_DataType_BF16;
    a->p[i] = in_place(((XLA_FFI_Buffer*)p)->data, ((XLA_FFI_Buffer*)ret)->data, size, item);
    a->g[i] = ((XLA_FFI_Buffer*)g)->data;
    job->offset[i + 1] = job->offset[i] + size;
    return NULL;
}

static XLA_FFI_Error* adamw_go(XLA_FFI_CallFrame* frame, Job* job) {
    job->parts = parts_for(frame, job->offset[job->n]);
    job->run = adamw_run;
    run_job(frame, job);
    release(job);
    return NULL;
}

XLA_FFI_Error* gradax_adamw_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 2 || (nargs - 2) % 4 != 0 || nrets != 3 * ((nargs - 2) / 4))
        return make_error(frame, "gradax_adamw_step: expected 2 + 4n operands and 3n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_adamw_step: every operand must be a buffer");
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!adamw_head(args, n))
        return make_error(frame, "gradax_adamw_step: wrong number or dtype of scalars or weight decays");
    Job* job = adamw_job(n, args);
    if (job == NULL) return make_error(frame, "gradax_adamw_step: out of memory");
    AdamW* a = (AdamW*)job->data;
    for (int64_t i = 0; i < n; ++i) {
        void *m = args[2 + 2 * n + i], *v = args[2 + 3 * n + i];
        const char* error = adamw_leaf(job, i, args[2 + i], args[2 + n + i], rets[i]);
        if (error == NULL && (dtype_of(m) != XLA_FFI_DataType_F32 || dtype_of(v) != XLA_FFI_DataType_F32 ||
                              num_elements((XLA_FFI_Buffer*)m) != job->offset[i + 1] - job->offset[i] ||
                              num_elements((XLA_FFI_Buffer*)v) != job->offset[i + 1] - job->offset[i]))
            error = "gradax_adamw_step: the moments must be float32 of the params' size";
        if (error != NULL) {
            free(job);
            return make_error(frame, error);
        }
        int64_t size = job->offset[i + 1] - job->offset[i];
        a->m[i] = in_place(data_of(m), data_of(rets[n + i]), size, sizeof(float));
        a->v[i] = in_place(data_of(v), data_of(rets[2 * n + i]), size, sizeof(float));
    }
    return adamw_go(frame, job);
}

/* gradax_adamw_flat_step: AdamW over leaves whose moments are slices of two flat vectors (gradax.flatten's state):
 *   args[0] float32[NS] scalars, args[1] float32[n] weight decays, args[2] int32[2] where the first leaf starts in
 *   the flat moments (low 31 bits, then the rest), args[3], args[4] float32[T] the flat first and second moments,
 *   args[5+i] params leaf i, args[5+n+i] grads leaf i; leaf i's moments follow leaf i-1's.
 *   rets[0], rets[1] the flat moments, rets[2+i] the params (all aliased). */
XLA_FFI_Error* gradax_adamw_flat_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 5 || (nargs - 5) % 2 != 0 || nrets != 2 + (nargs - 5) / 2)
        return make_error(frame, "gradax_adamw_flat_step: expected 5 + 2n operands and 2 + n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_adamw_flat_step: every operand must be a buffer");
    int64_t n = (nargs - 5) / 2;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!adamw_head(args, n))
        return make_error(frame, "gradax_adamw_flat_step: wrong number or dtype of scalars or weight decays");
    XLA_FFI_Buffer *start = args[2], *m = args[3], *v = args[4];
    int64_t total = num_elements(m);
    if (start->dtype != XLA_FFI_DataType_S32 || num_elements(start) != 2 || dtype_of(m) != XLA_FFI_DataType_F32 ||
        dtype_of(v) != XLA_FFI_DataType_F32 || num_elements(v) != total)
        return make_error(frame, "gradax_adamw_flat_step: expected int32[2] start and float32[T] flat moments");
    const int32_t* at = (const int32_t*)start->data;
    int64_t first = (int64_t)at[0] + ((int64_t)at[1] << 31);
    Job* job = adamw_job(n, args);
    if (job == NULL) return make_error(frame, "gradax_adamw_flat_step: out of memory");
    AdamW* a = (AdamW*)job->data;
    float* m_flat = in_place(m->data, data_of(rets[0]), total, sizeof(float));
    float* v_flat = in_place(v->data, data_of(rets[1]), total, sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
        const char* error = adamw_leaf(job, i, args[5 + i], args[5 + n + i], rets[2 + i]);
        if (error == NULL && first + job->offset[i + 1] > total)
            error = "gradax_adamw_flat_step: the leaves run past the end of the flat moments";
        if (error != NULL) {
            free(job);
            return make_error(frame, error);
        }
        a->m[i] = m_flat + first + job->offset[i];
        a->v[i] = v_flat + first + job->offset[i];
    }
    return adamw_go(frame, job);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* AdamW with block-wise 8-bit moments (gradax._quantization): per block, the gradient's absmax gives the new
 * scales, then one pass decodes the old codes, updates the moments and the params, and encodes the new codes with
 * stochastic rounding. Reads p (4), g (4), two codes (2) and writes p (4), two codes (2): 16 bytes per parameter
 * where float32 AdamW moves 28. The arithmetic is that of scale_by_adam(moments=...), operation for operation. */

/* the 8-bit float formats: magnitudes relative to the block's scale */
#define SIGNED_SHIFT 20     /* 23 - 3 mantissa bits */
#define SIGNED_OFFSET 889   /* (127 << 3) - 127 */
#define SIGNED_TOP 127
#define ROOT_SHIFT 19       /* 23 - 4 mantissa bits */
#define ROOT_OFFSET 1777    /* (127 << 4) - 255 */
#define ROOT_TOP 255

/* gradax._quantization.dither: a hash of the element's index in the (blocks, block_size) array and the seed */
static inline uint32_t dither(uint32_t index, uint32_t seed) {
    uint32_t x = index * 0x9E3779B1u + seed * 0x85EBCA6Bu;
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

/* _Format.encode with stochastic rounding: the code of magnitude bits `bits` (0 <= y <= 1) */
static inline int32_t encode_magnitude(uint32_t bits, uint32_t noise, int shift, int32_t offset, int32_t top) {
    int32_t q = ((int32_t)bits + (int32_t)(noise >> (32 - shift))) >> shift;
    q -= offset;
    return q < 0 ? 0 : (q > top ? top : q);
}

static inline float decode_magnitude(int32_t code, int shift, int32_t offset) {
    return bits_f32(code == 0 ? 0u : (uint32_t)(code + offset) << shift);
}

static inline float safe_inverse(float s) { return s > 0.0f ? 1.0f / s : 0.0f; }

/* One element: decodes its codes (old scales ms, vs), updates its moments (gradient gi), returns the Adam update
 * and writes the new codes (inverse new scales im, iv). With eps_root = 0 it takes sqrt(v / c2) as
 * sqrt(v) / sqrt(c2), sharing the square root that the code of sqrt(v) needs (within an ulp or two of
 * scale_by_adam; the codes agree but where a moment lands on a rounding boundary). */
static inline __attribute__((always_inline)) float q8_element(
    const AdamConsts* k, float gi, uint8_t* mc, uint8_t* vc, float ms, float vs, float im, float iv, uint32_t index,
    uint32_t seed, const int nesterov, const int eps_root) {
    int32_t mcode = *mc, vcode = *vc;
    float magnitude = decode_magnitude(mcode & 0x7F, SIGNED_SHIFT, SIGNED_OFFSET);
    float m_old = bits_f32(f32_bits(magnitude) | ((uint32_t)(mcode >> 7) << 31)) * ms;
    float root = decode_magnitude(vcode, ROOT_SHIFT, ROOT_OFFSET) * vs;
    float mi, vi;
    float mhat = adam_moments(k, gi, m_old, root * root, nesterov, &mi, &vi);
    float root_v = sqrtf(vi);
    float u = mhat / ((eps_root ? sqrtf(vi * k->ic2 + k->eps_root) : root_v * k->isc2) + k->eps);
    /* dither_pair: one hash, and the same with its halves swapped for the second moment */
    const uint32_t noise = dither(index, seed), swapped = (noise << 16) | (noise >> 16);
    uint32_t ybits = f32_bits(mi * im);
    int32_t mag = encode_magnitude(ybits & 0x7FFFFFFFu, noise, SIGNED_SHIFT, SIGNED_OFFSET, SIGNED_TOP);
    *mc = (uint8_t)(((ybits >> 31) << 7) | (uint32_t)mag);
    *vc = (uint8_t)encode_magnitude(f32_bits(root_v * iv), swapped, ROOT_SHIFT, ROOT_OFFSET, ROOT_TOP);
    return u;
}

typedef struct {
    float s[NS];
    uint32_t seed;
    float* wd;
    int64_t* size;  /* elements of leaf i */
    int64_t* block; /* block size of leaf i */
    float **p, **g, **ms, **vs;
    uint8_t **mc, **vc;
} AdamW8;

/* blocks [lo, hi) of one leaf */
static inline __attribute__((always_inline)) void adamw8_body(
    const AdamW8* a, float wd, float* restrict p, const float* restrict g, uint8_t* restrict mc,
    float* restrict ms, uint8_t* restrict vc, float* restrict vs, int64_t size, int64_t B, int64_t lo, int64_t hi,
    const int nesterov, const int decay, const int eps_root) {
    const AdamConsts k = adam_consts(a->s);
    for (int64_t b = lo; b < hi; ++b) {
        const int64_t e0 = b * B, valid = size - e0 < B ? size - e0 : B;
        /* the block's gradient absmax (block_absmax: max(max(g), -min(g)) over the zero-padded block), as the
         * largest magnitude bit pattern: an integer max that vectorizes; a NaN gradient gives a NaN, as there */
        uint32_t top = 0;
        for (int64_t j = 0; j < valid; ++j) {
            uint32_t bits = f32_bits(g[e0 + j] * k.scale) & 0x7FFFFFFFu;
            top = bits > top ? bits : top;
        }
        const float gmax = bits_f32(top);
        const float ms_old = ms[b], vs_old = vs[b];
        const float ms_new = k.b1 * ms_old + k.omb1 * gmax;
        const float vs_new = sqrtf(k.b2 * vs_old * vs_old + k.omb2 * gmax * gmax);
        const float im = safe_inverse(ms_new), iv = safe_inverse(vs_new);
        const uint32_t base = (uint32_t)b * (uint32_t)B;
        uint8_t* restrict mcb = mc + e0;
        uint8_t* restrict vcb = vc + e0;
        float* restrict pb = p + e0;
        const float* restrict gb = g + e0;
        for (int64_t j = 0; j < valid; ++j) {
            float u = q8_element(&k, gb[j] * k.scale, mcb + j, vcb + j, ms_old, vs_old, im, iv,
                                 base + (uint32_t)j, a->seed, nesterov, eps_root);
            float pi = pb[j];
            if (decay) u = u + wd * pi;
            pb[j] = pi + u * k.neg_lr;
        }
        for (int64_t j = valid; j < B; ++j) /* the padding: a zero gradient, no parameter */
            (void)q8_element(&k, 0.0f, mcb + j, vcb + j, ms_old, vs_old, im, iv, base + (uint32_t)j, a->seed,
                             nesterov, eps_root);
        ms[b] = ms_new;
        vs[b] = vs_new;
    }
}

GRADAX_CLONES
static void adamw8_blocks(const AdamW8* a, float wd, float* restrict p, const float* restrict g,
                          uint8_t* restrict mc, float* restrict ms, uint8_t* restrict vc, float* restrict vs,
                          int64_t size, int64_t B, int64_t lo, int64_t hi) {
    const int nesterov = a->s[S_NESTEROV] != 0.0f, decay = wd != 0.0f, eps_root = a->s[S_EPS_ROOT] != 0.0f;
#define ADAMW8_BODY(N, D, E) adamw8_body(a, wd, p, g, mc, ms, vc, vs, size, B, lo, hi, N, D, E)
    if (eps_root) {
        if (nesterov && decay) ADAMW8_BODY(1, 1, 1);
        else if (nesterov) ADAMW8_BODY(1, 0, 1);
        else if (decay) ADAMW8_BODY(0, 1, 1);
        else ADAMW8_BODY(0, 0, 1);
    } else {
        if (nesterov && decay) ADAMW8_BODY(1, 1, 0);
        else if (nesterov) ADAMW8_BODY(1, 0, 0);
        else if (decay) ADAMW8_BODY(0, 1, 0);
        else ADAMW8_BODY(0, 0, 0);
    }
#undef ADAMW8_BODY
}

static void adamw8_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    AdamW8* a = (AdamW8*)job->data;
    adamw8_blocks(a, a->wd[leaf], a->p[leaf], a->g[leaf], a->mc[leaf], a->ms[leaf], a->vc[leaf], a->vs[leaf],
                  a->size[leaf], a->block[leaf], lo, hi);
}

/* gradax_adamw8_step operands: args[0] float32[NS] scalars, args[1] float32[n] weight decays, args[2] int32[1] the
 * dither seed (one hash per element serves both moments, as dither_pair); then per leaf i: args[3+i] params, args[3+n+i] grads (float32),
 * args[3+2n+i] first-moment codes uint8[blocks, B], args[3+3n+i] their scales float32[blocks], args[3+4n+i] and
 * args[3+5n+i] the second moment's. Results (aliased): params, first codes, first scales, second codes, second
 * scales, n of each. */
XLA_FFI_Error* gradax_adamw8_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 3 || (nargs - 3) % 6 != 0 || nrets != 5 * ((nargs - 3) / 6))
        return make_error(frame, "gradax_adamw8_step: expected 3 + 6n operands and 5n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_adamw8_step: every operand must be a buffer");
    int64_t n = (nargs - 3) / 6;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (dtype_of(args[0]) != XLA_FFI_DataType_F32 || num_elements((XLA_FFI_Buffer*)args[0]) != NS ||
        dtype_of(args[1]) != XLA_FFI_DataType_F32 || num_elements((XLA_FFI_Buffer*)args[1]) != n ||
        dtype_of(args[2]) != XLA_FFI_DataType_S32 || num_elements((XLA_FFI_Buffer*)args[2]) != 1)
        return make_error(frame, "gradax_adamw8_step: wrong scalars, weight decays or seeds");
    size_t slots = (size_t)(n > 0 ? n : 1);
    Job* job = new_job(n, sizeof(AdamW8) + slots * (6 * sizeof(void*) + 2 * sizeof(int64_t) + sizeof(float)));
    if (job == NULL) return make_error(frame, "gradax_adamw8_step: out of memory");
    AdamW8* a = (AdamW8*)job->data;
    char* cursor = (char*)job->data + sizeof(AdamW8);
    a->size = (int64_t*)cursor; cursor += slots * sizeof(int64_t);
    a->block = (int64_t*)cursor; cursor += slots * sizeof(int64_t);
    a->p = (float**)cursor; cursor += slots * sizeof(void*);
    a->g = (float**)cursor; cursor += slots * sizeof(void*);
    a->ms = (float**)cursor; cursor += slots * sizeof(void*);
    a->vs = (float**)cursor; cursor += slots * sizeof(void*);
    a->mc = (uint8_t**)cursor; cursor += slots * sizeof(void*);
    a->vc = (uint8_t**)cursor; cursor += slots * sizeof(void*);
    a->wd = (float*)cursor;
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->wd, data_of(args[1]), (size_t)n * sizeof(float));
    a->seed = (uint32_t)((const int32_t*)((XLA_FFI_Buffer*)args[2])->data)[0];
    job->offset[0] = 0;
    int64_t elements = 0;
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer *p = args[3 + i], *g = args[3 + n + i], *mc = args[3 + 2 * n + i],
                       *ms = args[3 + 3 * n + i], *vc = args[3 + 4 * n + i], *vs = args[3 + 5 * n + i];
        int64_t size = num_elements(p), blocks = mc->rank == 2 ? mc->dims[0] : -1;
        int64_t B = mc->rank == 2 ? mc->dims[1] : 0;
        int ok = p->dtype == XLA_FFI_DataType_F32 && g->dtype == XLA_FFI_DataType_F32 &&
                 mc->dtype == XLA_FFI_DataType_U8 && vc->dtype == XLA_FFI_DataType_U8 &&
                 ms->dtype == XLA_FFI_DataType_F32 && vs->dtype == XLA_FFI_DataType_F32 && B > 0 &&
                 num_elements(g) == size && blocks == (size + B - 1) / B && num_elements(vc) == blocks * B &&
                 num_elements(ms) == blocks && num_elements(vs) == blocks && size > 0;
        if (!ok) {
            free(job);
            return make_error(frame, "gradax_adamw8_step: expected float32 params and grads of one size, uint8 "
                                     "codes [ceil(size/B), B] and float32 scales [ceil(size/B)]");
        }
        a->size[i] = size;
        a->block[i] = B;
        a->p[i] = in_place(p->data, ((XLA_FFI_Buffer*)rets[i])->data, size, sizeof(float));
        a->g[i] = g->data;
        a->mc[i] = in_place(mc->data, ((XLA_FFI_Buffer*)rets[n + i])->data, blocks * B, 1);
        a->ms[i] = in_place(ms->data, ((XLA_FFI_Buffer*)rets[2 * n + i])->data, blocks, sizeof(float));
        a->vc[i] = in_place(vc->data, ((XLA_FFI_Buffer*)rets[3 * n + i])->data, blocks * B, 1);
        a->vs[i] = in_place(vs->data, ((XLA_FFI_Buffer*)rets[4 * n + i])->data, blocks, sizeof(float));
        job->offset[i + 1] = job->offset[i] + blocks; /* the work is counted in blocks */
        elements += blocks * B;
    }
    job->parts = parts_for(frame, elements);
    job->run = adamw8_run;
    run_job(frame, job);
    release(job);
    return NULL;
}
