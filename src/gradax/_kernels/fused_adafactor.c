/* The update of Adafactor's factored matrices (gradax.fused.adafactor), called from XLA through its FFI.
 *
 * gradax_adafactor_matrices: args[0] float32[n, NA] (enum AdafactorScalar, fused_scalars.h: per leaf, 1 where the
 *   normalized factor is the per-column one, then the three scales of the update); then per leaf i of n:
 *   args[1+i] float32 params [R, C], args[1+n+i] gradients [R, C], args[1+2n+i] float32[R] per-row factor,
 *   args[1+3n+i] float32[C] per-column factor. rets: the new params, each aliased to its operand (in place).
 *
 * Every reduction of the step (the row and column means of g^2 + eps, the factors, the clipping RMS, the
 * parameters' RMS) is computed in the step's program as gradax.adafactor's update computes it
 * (optimizers/_adafactor.py: kernel_second_moments, whose statistics and clipping sum come from
 * gradax_factored_moments in fused_factored.c, and the parameter scale in XLA), so with the update's own roundings.
 * What is left is the one element-wise pass XLA:CPU fuses at the end of the step, made here with XLA's roundings, in
 * its order:
 *
 *   u = ((g x) y) s1) s2,   p <- p - u s3   (x the normalized factor, y the other; the subtraction and the last
 *                                            product one fused multiply-add where XLA:CPU contracts them)
 *
 * where s1, s2, s3 are the update's scalar factors as XLA's algebraic simplifier groups them (the clipping's
 * reciprocal, the learning rate, the parameters' RMS, a constant learning rate folded into the RMS; 1 for those
 * absent), which the step computes in the same program; with none at all (y_last), p <- p - (g x) y, the product
 * by y being the one contracted. 12 B/param (read g and p, write p), split by elements over
 * XLA's thread pool, matrix after matrix as one job.
 */
#include "fused_common.h"

static int matrix(const XLA_FFI_Buffer* b) { return b->rank == 2 && b->dtype == XLA_FFI_DataType_F32; }

static int64_t rows_of(const XLA_FFI_Buffer* b) { return b->dims[0]; }
static int64_t cols_of(const XLA_FFI_Buffer* b) { return b->dims[1]; }

static int vector_of(const XLA_FFI_Buffer* v, int64_t size) {
    return v->dtype == XLA_FFI_DataType_F32 && num_elements(v) == size;
}

typedef struct Adafactor Adafactor;
struct Adafactor {
    float** p;
    const float** g;
    const float **a, **b; /* per leaf: the per-row factor [R], the per-column factor [C] */
    int64_t* cols;
    const float* s; /* float32[n, NA] */
    void (*span)(const Adafactor* f, int64_t leaf, int64_t lo, int64_t hi);
};

/* Elements [lo, hi) of leaf `leaf` (row-major), row piece by row piece. */
static inline __attribute__((always_inline)) void apply_body(const Adafactor* f, int64_t leaf, int64_t lo, int64_t hi,
                                                             const int fused) {
    const float* s = f->s + leaf * NA;
    const int b_first = s[A_B_FIRST] != 0.0f, y_last = s[A_Y_LAST] != 0.0f;
    const float s1 = s[A_FIRST_SCALE], s2 = s[A_SECOND_SCALE], s3 = s[A_LAST_SCALE];
    const int64_t C = f->cols[leaf];
    float* restrict p = f->p[leaf];
    const float* restrict g = f->g[leaf];
    const float* restrict a = f->a[leaf];
    const float* restrict b = f->b[leaf];
    for (int64_t k = lo; k < hi;) {
        const int64_t i = k / C, j0 = k - i * C, j1 = (hi - i * C < C ? hi - i * C : C);
        float* restrict prow = p + i * C;
        const float* restrict grow = g + i * C;
        const float ai = a[i];
        if (y_last && b_first) {
            for (int64_t j = j0; j < j1; ++j) prow[j] = muladd(-(grow[j] * b[j]), ai, prow[j], fused);
        } else if (y_last) {
            for (int64_t j = j0; j < j1; ++j) prow[j] = muladd(-(grow[j] * ai), b[j], prow[j], fused);
        } else if (b_first) {
            for (int64_t j = j0; j < j1; ++j) {
                const float u = ((grow[j] * b[j]) * ai * s1) * s2;
                prow[j] = muladd(-u, s3, prow[j], fused);
            }
        } else {
            for (int64_t j = j0; j < j1; ++j) {
                const float u = ((grow[j] * ai) * b[j] * s1) * s2;
                prow[j] = muladd(-u, s3, prow[j], fused);
            }
        }
        k = i * C + j1;
    }
}

GRADAX_FMA_VARIANTS(apply_span, apply_body, (const Adafactor* f, int64_t leaf, int64_t lo, int64_t hi),
                    (f, leaf, lo, hi))

static void apply_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    const Adafactor* f = (const Adafactor*)job->data;
    f->span(f, leaf, lo, hi);
}

XLA_FFI_Error* gradax_adafactor_matrices(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs < 1 || (nargs - 1) % 4 != 0 || frame->rets.size != (nargs - 1) / 4)
        return make_error(frame, "gradax_adafactor_matrices: expected 1 + 4n operands and n results");
    int64_t n = (nargs - 1) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_adafactor_matrices: operands must be buffers");
    if (!vector_of((XLA_FFI_Buffer*)args[0], n * NA))
        return make_error(frame, "gradax_adafactor_matrices: expected float32[n, NA] scalars");
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer *p = args[1 + i], *g = args[1 + n + i];
        if (!matrix(p) || !matrix(g) || rows_of(p) != rows_of(g) || cols_of(p) != cols_of(g) ||
            !vector_of((XLA_FFI_Buffer*)args[1 + 2 * n + i], rows_of(g)) ||
            !vector_of((XLA_FFI_Buffer*)args[1 + 3 * n + i], cols_of(g)))
            return make_error(frame, "gradax_adafactor_matrices: expected float32 params and grads [R, C], "
                                     "factors [R] and [C]");
    }
    size_t leaves = (size_t)(n > 0 ? n : 1), ptrs = leaves * sizeof(void*);
    Job* job = new_job(n, sizeof(Adafactor) + 4 * ptrs + leaves * sizeof(int64_t));
    if (job == NULL) return make_error(frame, "gradax_adafactor_matrices: out of memory");
    Adafactor* f = (Adafactor*)job->data;
    char* cursor = (char*)job->data + sizeof(Adafactor);
    f->p = (float**)cursor;
    f->g = (const float**)(cursor + ptrs);
    f->a = (const float**)(cursor + 2 * ptrs);
    f->b = (const float**)(cursor + 3 * ptrs);
    f->cols = (int64_t*)(cursor + 4 * ptrs);
    f->s = data_of(args[0]);
    f->span = apply_span_for_cpu();
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer* g = args[1 + n + i];
        int64_t size = rows_of(g) * cols_of(g);
        f->p[i] = in_place(data_of(args[1 + i]), data_of(rets[i]), size, sizeof(float));
        f->g[i] = (const float*)g->data;
        f->a[i] = data_of(args[1 + 2 * n + i]);
        f->b[i] = data_of(args[1 + 3 * n + i]);
        f->cols[i] = cols_of(g);
        job->offset[i + 1] = job->offset[i] + size;
    }
    job->parts = parts_for(frame, job->offset[n]);
    job->run = apply_run;
    run_job(frame, job);
    release(job);
    return NULL;
}
