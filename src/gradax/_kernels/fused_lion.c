/* The single-pass CPU kernel of gradax.fused.lion, called from XLA through its FFI (C API, xla/ffi/api/c_api.h).
 *
 * gradax_lion_flat_step (below) is the same pass where the momentum is gradax.flatten's one flat vector.
 *
 * gradax_lion_step: one pass over every leaf of the tree reads p, g, m and writes p, m in place (20 bytes per
 * float32 parameter). Operands:
 *   args[0]        float32[NL] step scalars (enum LionScalar, fused_scalars.h)
 *   args[1]        float32[n] 1 where leaf i is decayed, 0 where the mask (or a weight decay of 0) leaves it
 *   args[2+i]      params leaf i,  args[2+n+i] grads leaf i,  args[2+2n+i] momentum leaf i
 *   rets[i]        new params i,   rets[n+i] new momentum i
 * The results alias the params and momentum operands (input_output_aliases), so the update is in place.
 *
 * Each leaf is one of three kinds: float32 params, grads and momentum; bfloat16 params and grads with a float32
 * momentum (gradax's default for bfloat16 params); or all three bfloat16. The arithmetic is that of XLA:CPU's code
 * for lion's update + apply_updates, rounding for rounding:
 *   c = (1-b1) g + b1 m;  u = sign(c);  m' = (1-b2) g + b2 m;  u = u + wd p (decayed leaves);  p' = p + (-lr) u
 * in float32, where bfloat16 leaves round u to bfloat16 after the decay and after the learning rate (the updates
 * each transformation of the chain returns), then p' and a bfloat16 m'. On a CPU with FMA, XLA:CPU contracts each
 * multiply-add into one fused multiply-add (one rounding): with the product of the gradient for float32 leaves and
 * bfloat16 ones, with the product of the momentum for bfloat16 leaves with a float32 momentum (measured; see
 * tests/test_fused_lion.py). The kernel makes the same fmaf calls (the library is built with -ffp-contract=off, so
 * it contracts nothing else), and none on a CPU without FMA.
 */
#include "fused_common.h"

#include <stdio.h> /* snprintf, for error messages */

/* enum LionScalar (L_B1, ..., NL): fused_scalars.h, generated from gradax._kernels._scalars.LION */

enum LeafKind { F32, BF16_MU_F32, BF16 };

typedef struct Lion Lion;
struct Lion {
    float s[NL];
    float* decay;       /* [n] */
    int* kind;          /* [n] enum LeafKind */
    void **p, **g, **m; /* p and m updated in place (the results alias the operands) */
    void (*span)(const Lion* a, int64_t leaf, int64_t lo, int64_t hi); /* this CPU's variant (lion_span_for_cpu) */
};

/* jnp.sign: -1, 1, or x itself for +-0 and NaN */
static inline __attribute__((always_inline)) float sign_of(float x) {
    return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
}

/* One span of one leaf, in place, with restrict pointers (the compiler vectorizes without runtime overlap checks,
 * which an exact alias of input and output would fail). `fused` is a constant in each instruction-set variant
 * below (a runtime flag would keep the loops from vectorizing); `decay` is a select, which vectorizes. */
static inline __attribute__((always_inline)) void lion_span_body(const Lion* a, int64_t leaf, int64_t lo, int64_t hi,
                                                            const int fused) {
    const float b1 = a->s[L_B1], omb1 = a->s[L_ONE_MINUS_B1], b2 = a->s[L_B2], omb2 = a->s[L_ONE_MINUS_B2];
    const float wd = a->s[L_WEIGHT_DECAY], neg_lr = a->s[L_NEG_LR];
    const int decay = a->decay[leaf] != 0.0f;
    if (a->kind[leaf] == F32) {
        float* restrict p = a->p[leaf];
        const float* restrict g = a->g[leaf];
        float* restrict m = a->m[leaf];
        for (int64_t i = lo; i < hi; ++i) {
            float gi = g[i], mi = m[i], pi = p[i];
            float u = sign_of(muladd(omb1, gi, b1 * mi, fused));
            m[i] = muladd(omb2, gi, b2 * mi, fused);
            u = decay ? muladd(wd, pi, u, fused) : u;
            p[i] = muladd(neg_lr, u, pi, fused);
        }
    } else if (a->kind[leaf] == BF16_MU_F32) {
        uint16_t* restrict p = a->p[leaf];
        const uint16_t* restrict g = a->g[leaf];
        float* restrict m = a->m[leaf];
        for (int64_t i = lo; i < hi; ++i) {
            float gi = bf16_to_f32(g[i]), mi = m[i], pi = bf16_to_f32(p[i]);
            float u = sign_of(muladd(b1, mi, omb1 * gi, fused)); /* exact in bfloat16 */
            m[i] = muladd(b2, mi, omb2 * gi, fused);
            u = decay ? round_bf16(muladd(wd, pi, u, fused)) : u;
            u = round_bf16(neg_lr * u);
            p[i] = f32_to_bf16(pi + u);
        }
    } else {
        uint16_t* restrict p = a->p[leaf];
        const uint16_t* restrict g = a->g[leaf];
        uint16_t* restrict m = a->m[leaf];
        for (int64_t i = lo; i < hi; ++i) {
            float gi = bf16_to_f32(g[i]), mi = bf16_to_f32(m[i]), pi = bf16_to_f32(p[i]);
            float u = sign_of(muladd(omb1, gi, b1 * mi, fused));
            m[i] = f32_to_bf16(muladd(omb2, gi, b2 * mi, fused));
            u = decay ? round_bf16(muladd(wd, pi, u, fused)) : u;
            u = round_bf16(neg_lr * u);
            p[i] = f32_to_bf16(pi + u);
        }
    }
}

/* The variants, picked at run time by the CPU's features (fused_common.h): AVX-512, AVX2 or AVX with FMA, and none
 * (SSE2: separate multiply and add). */
GRADAX_FMA_VARIANTS(lion_span, lion_span_body, (const Lion* a, int64_t leaf, int64_t lo, int64_t hi), (a, leaf, lo, hi))

static void lion_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    Lion* a = (Lion*)job->data;
    a->span(a, leaf, lo, hi);
}

/* the kind of a leaf from its params, grads and momentum dtypes; -1 when the kernel does not cover them */
static int leaf_kind(XLA_FFI_DataType p, XLA_FFI_DataType g, XLA_FFI_DataType m) {
    if (p == XLA_FFI_DataType_F32 && g == p && m == XLA_FFI_DataType_F32) return F32;
    if (p == XLA_FFI_DataType_BF16 && g == p && m == XLA_FFI_DataType_F32) return BF16_MU_F32;
    if (p == XLA_FFI_DataType_BF16 && g == p && m == XLA_FFI_DataType_BF16) return BF16;
    return -1;
}

/* A job for n leaves: the scalars (args[0]) and decay flags (args[1]) copied, the span for this CPU; NULL when out
 * of memory. The leaves are added by lion_leaf. */
static Job* lion_job(int64_t n, void** args) {
    size_t leaves = (size_t)(n > 0 ? n : 1), ptrs = leaves * sizeof(void*);
    Job* job = new_job(n, sizeof(Lion) + 3 * ptrs + leaves * (sizeof(float) + sizeof(int)));
    if (job == NULL) return NULL;
    Lion* a = (Lion*)job->data;
    char* cursor = (char*)job->data + sizeof(Lion);
    a->p = (void**)cursor; a->g = (void**)(cursor + ptrs); a->m = (void**)(cursor + 2 * ptrs);
    a->decay = (float*)(cursor + 3 * ptrs);
    a->kind = (int*)(cursor + 3 * ptrs + leaves * sizeof(float));
    memcpy(a->s, data_of(args[0]), sizeof(a->s));
    memcpy(a->decay, data_of(args[1]), (size_t)n * sizeof(float));
    a->span = lion_span_for_cpu();
    job->offset[0] = 0;
    return job;
}

static int lion_head(void** args, int64_t n) {
    return dtype_of(args[0]) == XLA_FFI_DataType_F32 && dtype_of(args[1]) == XLA_FFI_DataType_F32 &&
           num_elements((XLA_FFI_Buffer*)args[0]) == NL && num_elements((XLA_FFI_Buffer*)args[1]) == n;
}

static size_t momentum_item(int kind) { return kind == BF16 ? sizeof(uint16_t) : sizeof(float); }

/* Leaf i's params p (updated in place into ret_p) and grads g, with a momentum of dtype m_dtype: its kind, its
 * pointers and where it ends; an error message, or NULL. */
static const char* lion_leaf(Job* job, int64_t i, void* p, void* g, XLA_FFI_DataType m_dtype, void* ret_p) {
    Lion* a = (Lion*)job->data;
    int64_t size = num_elements((XLA_FFI_Buffer*)p);
    a->kind[i] = leaf_kind(dtype_of(p), dtype_of(g), m_dtype);
    if (a->kind[i] < 0) return "a leaf's dtypes are not float32 or bfloat16 as supported";
    if (num_elements((XLA_FFI_Buffer*)g) != size) return "params and grads differ in size";
    if (dtype_of(ret_p) != dtype_of(p)) return "results differ in dtype from params";
    size_t p_item = a->kind[i] == F32 ? sizeof(float) : sizeof(uint16_t);
    a->p[i] = in_place(((XLA_FFI_Buffer*)p)->data, ((XLA_FFI_Buffer*)ret_p)->data, size, p_item);
    a->g[i] = ((XLA_FFI_Buffer*)g)->data;
    job->offset[i + 1] = job->offset[i] + size;
    return NULL;
}

static XLA_FFI_Error* lion_go(XLA_FFI_CallFrame* frame, Job* job) {
    job->parts = parts_for(frame, job->offset[job->n]);
    job->run = lion_run;
    run_job(frame, job);
    release(job);
    return NULL;
}

/* an error of `handler`: "handler: message" (messages are static; the longest fits) */
static XLA_FFI_Error* lion_error(XLA_FFI_CallFrame* frame, Job* job, const char* handler, const char* message) {
    char text[256];
    snprintf(text, sizeof(text), "%s: %s", handler, message);
    free(job);
    return make_error(frame, text);
}

XLA_FFI_Error* gradax_lion_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 2 || (nargs - 2) % 3 != 0 || nrets != 2 * ((nargs - 2) / 3))
        return make_error(frame, "gradax_lion_step: expected 2 + 3n operands and 2n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_lion_step: every operand must be a buffer");
    int64_t n = (nargs - 2) / 3;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!lion_head(args, n))
        return make_error(frame, "gradax_lion_step: wrong number or dtype of scalars or decay flags");
    Job* job = lion_job(n, args);
    if (job == NULL) return make_error(frame, "gradax_lion_step: out of memory");
    Lion* a = (Lion*)job->data;
    for (int64_t i = 0; i < n; ++i) {
        void *p = args[2 + i], *g = args[2 + n + i], *m = args[2 + 2 * n + i];
        const char* error = lion_leaf(job, i, p, g, dtype_of(m), rets[i]);
        int64_t size = job->offset[i + 1] - job->offset[i];
        if (error == NULL && num_elements((XLA_FFI_Buffer*)m) != size)
            error = "params, grads and momentum differ in size";
        else if (error == NULL && dtype_of(rets[n + i]) != dtype_of(m))
            error = "results differ in dtype from the momentum";
        if (error != NULL) return lion_error(frame, job, "gradax_lion_step", error);
        a->m[i] = in_place(((XLA_FFI_Buffer*)m)->data, ((XLA_FFI_Buffer*)rets[n + i])->data, size,
                           momentum_item(a->kind[i]));
    }
    return lion_go(frame, job);
}

/* gradax_lion_flat_step: Lion over leaves whose momentum is a slice of one flat vector (gradax.flatten's state):
 *   args[0] float32[NL] scalars, args[1] float32[n] decay flags, args[2] int32[2] where the first leaf starts in
 *   the flat momentum (low 31 bits, then the rest), args[3] the flat momentum [T] (float32, or bfloat16 with
 *   bfloat16 params), args[4+i] params leaf i, args[4+n+i] grads leaf i; leaf i's momentum follows leaf i-1's.
 *   rets[0] the flat momentum, rets[1+i] the params (all aliased). */
XLA_FFI_Error* gradax_lion_flat_step(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size, nrets = frame->rets.size;
    if (nargs < 4 || (nargs - 4) % 2 != 0 || nrets != 1 + (nargs - 4) / 2)
        return make_error(frame, "gradax_lion_flat_step: expected 4 + 2n operands and 1 + n results");
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_lion_flat_step: every operand must be a buffer");
    int64_t n = (nargs - 4) / 2;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!lion_head(args, n))
        return make_error(frame, "gradax_lion_flat_step: wrong number or dtype of scalars or decay flags");
    XLA_FFI_Buffer *start = args[2], *m = args[3];
    int64_t total = num_elements(m);
    if (start->dtype != XLA_FFI_DataType_S32 || num_elements(start) != 2 || dtype_of(rets[0]) != m->dtype)
        return make_error(frame, "gradax_lion_flat_step: expected int32[2] start and a flat momentum");
    const int32_t* at = (const int32_t*)start->data;
    int64_t first = (int64_t)at[0] + ((int64_t)at[1] << 31);
    Job* job = lion_job(n, args);
    if (job == NULL) return make_error(frame, "gradax_lion_flat_step: out of memory");
    Lion* a = (Lion*)job->data;
    size_t item = m->dtype == XLA_FFI_DataType_BF16 ? sizeof(uint16_t) : sizeof(float);
    char* m_flat = (char*)in_place(m->data, ((XLA_FFI_Buffer*)rets[0])->data, total, item);
    for (int64_t i = 0; i < n; ++i) {
        const char* error = lion_leaf(job, i, args[4 + i], args[4 + n + i], m->dtype, rets[1 + i]);
        if (error == NULL && first + job->offset[i + 1] > total)
            error = "the leaves run past the end of the flat momentum";
        if (error != NULL) return lion_error(frame, job, "gradax_lion_flat_step", error);
        a->m[i] = m_flat + (size_t)(first + job->offset[i]) * item;
    }
    return lion_go(frame, job);
}
