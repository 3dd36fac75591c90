/* Passes over the matrix leaves of a factored Adafactor step (gradax.fused.adafactor), called from XLA through its
 * FFI. XLA:CPU spends five passes over the gradient on such a leaf (row means, column means, the clipping RMS, the
 * parameters' RMS, the update) and runs its reductions well below memory speed; these three kernels take three, at
 * memory speed, with the small per-row and per-column arithmetic left to jnp between them:
 *
 * gradax_row_col_sum_squares: args[i] float32 [R_i, C_i] gradients; rets[i] float32[R_i] (sum over each row of g^2),
 *   rets[n+i] float32[C_i] (sum over each column of g^2). Accumulated in float64.
 * gradax_weighted_sum_squares: args[i] gradients, args[n+i] float32[R_i] a, args[2n+i] float32[C_i] b;
 *   rets[0] float32[n]: sum_ij (g_ij a_i b_j)^2 (the squared norm of the update before clipping).
 * gradax_factored_apply: args[0] float32[3n] (div, lr, ps) per leaf, args[1] float32[n] 1 where the column factor
 *   multiplies first; args[2+i] params, args[2+n+i] gradients, args[2+2n+i] a, args[2+3n+i] b; rets[i] the new
 *   params (aliased): p - (((g x) y / div) lr) ps, with (x, y) = (b_j, a_i) or (a_i, b_j), the order of the chain.
 *
 * The work of each call is counted in rows, so a part of the job owns whole rows.
 */
#include "fused_common.h"

static int matrix(const XLA_FFI_Buffer* b) { return b->rank == 2 && b->dtype == XLA_FFI_DataType_F32; }

static int64_t rows_of(const XLA_FFI_Buffer* b) { return b->dims[0]; }
static int64_t cols_of(const XLA_FFI_Buffer* b) { return b->dims[1]; }

/* offsets in rows; returns the elements, or -1 when some operand is not a float32 matrix */
static int64_t row_offsets(Job* job, void** mats, int64_t n) {
    int64_t elements = 0;
    job->offset[0] = 0;
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)mats[i];
        if (!matrix(g)) return -1;
        job->offset[i + 1] = job->offset[i] + rows_of(g);
        elements += rows_of(g) * cols_of(g);
    }
    return elements;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Row and column sums of squares. Each part writes the row sums of its own rows and adds its column sums into its
 * own float64 row of partials; the caller adds the partials. */

typedef struct {
    void** g;
    float** rows;
    double** partial; /* partial[leaf]: [parts][C] */
} RowCol;

/* sum of x_j^2 y_j^2 over a row (y = NULL: 1), in 16 float32 lanes (vectorized) combined in float64 */
static inline double row_sum_squares(const float* restrict x, const float* restrict y, int64_t C) {
    float acc[16] = {0};
    int64_t j = 0;
    if (y == NULL) {
        for (; j + 16 <= C; j += 16)
            for (int k = 0; k < 16; ++k) acc[k] += x[j + k] * x[j + k];
    } else {
        for (; j + 16 <= C; j += 16)
            for (int k = 0; k < 16; ++k) {
                float t = x[j + k] * y[j + k];
                acc[k] += t * t;
            }
    }
    double total = 0.0;
    for (int k = 0; k < 16; ++k) total += acc[k];
    for (; j < C; ++j) {
        double t = y == NULL ? (double)x[j] : (double)x[j] * y[j];
        total += t * t;
    }
    return total;
}

GRADAX_CLONES
static void row_col_span(const float* restrict g, int64_t C, float* restrict rows, double* restrict cols,
                         int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
        const float* restrict row = g + i * C;
        for (int64_t j = 0; j < C; ++j) cols[j] += (double)row[j] * row[j];
        rows[i] = (float)row_sum_squares(row, NULL, C);
    }
}

static void row_col_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    RowCol* r = (RowCol*)job->data;
    const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)r->g[leaf];
    int64_t C = cols_of(g);
    row_col_span((const float*)g->data, C, r->rows[leaf], r->partial[leaf] + (size_t)part * (size_t)C, lo, hi);
}

XLA_FFI_Error* gradax_row_col_sum_squares(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t n = frame->args.size;
    if (frame->rets.size != 2 * n) return make_error(frame, "gradax_row_col_sum_squares: expected 2n results");
    for (int64_t i = 0; i < n; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_row_col_sum_squares: operands must be buffers");
    if (n == 0) return NULL;
    size_t slots = (size_t)n;
    int64_t cols_total = 0;
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)frame->args.args[i];
        if (!matrix(g) || num_elements((XLA_FFI_Buffer*)frame->rets.rets[i]) != rows_of(g) ||
            num_elements((XLA_FFI_Buffer*)frame->rets.rets[n + i]) != cols_of(g))
            return make_error(frame, "gradax_row_col_sum_squares: expected float32 matrices, float32[R] and [C] "
                                     "results");
        cols_total += cols_of(g);
    }
    size_t partial_bytes = (size_t)MAX_PARTS * (size_t)cols_total * sizeof(double);
    Job* job = new_job(n, sizeof(RowCol) + slots * 3 * sizeof(void*) + 16 + partial_bytes);
    if (job == NULL) return make_error(frame, "gradax_row_col_sum_squares: out of memory");
    RowCol* r = (RowCol*)job->data;
    char* cursor = (char*)job->data + sizeof(RowCol);
    r->g = (void**)cursor; cursor += slots * sizeof(void*);
    r->rows = (float**)cursor; cursor += slots * sizeof(void*);
    r->partial = (double**)cursor; cursor += slots * sizeof(void*);
    double* partial = (double*)(((uintptr_t)cursor + 15) & ~(uintptr_t)15);
    int64_t elements = row_offsets(job, frame->args.args, n);
    job->parts = parts_for(frame, elements);
    for (int64_t i = 0; i < n; ++i) {
        r->g[i] = frame->args.args[i];
        r->rows[i] = data_of(frame->rets.rets[i]);
        r->partial[i] = partial; /* [parts][C_i], zeroed by new_job */
        partial += (size_t)job->parts * (size_t)cols_of((XLA_FFI_Buffer*)r->g[i]);
    }
    job->run = row_col_run;
    run_job(frame, job);
    for (int64_t i = 0; i < n; ++i) {
        int64_t C = cols_of((XLA_FFI_Buffer*)r->g[i]);
        float* cols = data_of(frame->rets.rets[n + i]);
        for (int64_t j = 0; j < C; ++j) {
            double total = 0.0;
            for (int k = 0; k < job->parts; ++k) total += r->partial[i][(size_t)k * (size_t)C + (size_t)j];
            cols[j] = (float)total;
        }
    }
    release(job);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* sum_ij (g_ij a_i b_j)^2 = sum_i a_i^2 sum_j g_ij^2 b_j^2, per leaf; partial sums per part. */

typedef struct {
    void **g, **a, **b;
    double* partial; /* [parts][n] */
} Weighted;

GRADAX_CLONES
static double weighted_span(const float* restrict g, const float* restrict a, const float* restrict b, int64_t C,
                            int64_t lo, int64_t hi) {
    double total = 0.0;
    for (int64_t i = lo; i < hi; ++i) total += row_sum_squares(g + i * C, b, C) * ((double)a[i] * a[i]);
    return total;
}

static void weighted_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    Weighted* w = (Weighted*)job->data;
    const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)w->g[leaf];
    w->partial[(size_t)part * (size_t)job->n + (size_t)leaf] +=
        weighted_span((const float*)g->data, data_of(w->a[leaf]), data_of(w->b[leaf]), cols_of(g), lo, hi);
}

static int vector_of(const XLA_FFI_Buffer* v, int64_t size) {
    return v->dtype == XLA_FFI_DataType_F32 && num_elements(v) == size;
}

XLA_FFI_Error* gradax_weighted_sum_squares(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs % 3 != 0 || frame->rets.size != 1)
        return make_error(frame, "gradax_weighted_sum_squares: expected 3n operands and one result");
    int64_t n = nargs / 3;
    void** args = frame->args.args;
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_weighted_sum_squares: operands must be buffers");
    if (num_elements((XLA_FFI_Buffer*)frame->rets.rets[0]) != n)
        return make_error(frame, "gradax_weighted_sum_squares: expected a float32[n] result");
    if (n == 0) return NULL;
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)args[i];
        if (!matrix(g) || !vector_of((XLA_FFI_Buffer*)args[n + i], rows_of(g)) ||
            !vector_of((XLA_FFI_Buffer*)args[2 * n + i], cols_of(g)))
            return make_error(frame, "gradax_weighted_sum_squares: expected float32 [R, C], [R] and [C] operands");
    }
    size_t slots = (size_t)n;
    Job* job = new_job(n, sizeof(Weighted) + slots * 3 * sizeof(void*) + 16 + (size_t)MAX_PARTS * slots * 8);
    if (job == NULL) return make_error(frame, "gradax_weighted_sum_squares: out of memory");
    Weighted* w = (Weighted*)job->data;
    w->g = (void**)((char*)job->data + sizeof(Weighted));
    w->a = w->g + n;
    w->b = w->a + n;
    w->partial = (double*)(((uintptr_t)(w->b + n) + 15) & ~(uintptr_t)15);
    for (int64_t i = 0; i < n; ++i) {
        w->g[i] = args[i];
        w->a[i] = args[n + i];
        w->b[i] = args[2 * n + i];
    }
    job->parts = parts_for(frame, row_offsets(job, args, n));
    job->run = weighted_run;
    run_job(frame, job);
    float* out = data_of(frame->rets.rets[0]);
    for (int64_t i = 0; i < n; ++i) {
        double total = 0.0;
        for (int k = 0; k < job->parts; ++k) total += w->partial[(size_t)k * (size_t)n + (size_t)i];
        out[i] = (float)total;
    }
    release(job);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* p <- p - (((g x) y / div) lr) ps, in place */

typedef struct {
    const float* scalars; /* [3n]: div, lr, ps of leaf i at 3i */
    const float* b_first;
    void **p, **g, **a, **b;
} Apply;

GRADAX_CLONES
static void apply_span(float* restrict p, const float* restrict g, const float* restrict a, const float* restrict b,
                       int64_t C, int b_first, float div, float lr, float ps, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
        float* restrict prow = p + i * C;
        const float* restrict grow = g + i * C;
        const float ai = a[i];
        if (b_first) {
            for (int64_t j = 0; j < C; ++j) prow[j] = prow[j] - ((grow[j] * b[j]) * ai / div) * lr * ps;
        } else {
            for (int64_t j = 0; j < C; ++j) prow[j] = prow[j] - ((grow[j] * ai) * b[j] / div) * lr * ps;
        }
    }
}

static void apply_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    Apply* x = (Apply*)job->data;
    const XLA_FFI_Buffer* g = (const XLA_FFI_Buffer*)x->g[leaf];
    const float* s = x->scalars + 3 * leaf;
    apply_span(data_of(x->p[leaf]), (const float*)g->data, data_of(x->a[leaf]), data_of(x->b[leaf]), cols_of(g),
               x->b_first[leaf] != 0.0f, s[0], s[1], s[2], lo, hi);
}

XLA_FFI_Error* gradax_factored_apply(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs < 2 || (nargs - 2) % 4 != 0 || frame->rets.size != (nargs - 2) / 4)
        return make_error(frame, "gradax_factored_apply: expected 2 + 4n operands and n results");
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_factored_apply: operands must be buffers");
    if (!vector_of((XLA_FFI_Buffer*)args[0], 3 * n) || !vector_of((XLA_FFI_Buffer*)args[1], n))
        return make_error(frame, "gradax_factored_apply: expected float32[3n] scalars and float32[n] orders");
    if (n == 0) return NULL;
    size_t slots = (size_t)n;
    Job* job = new_job(n, sizeof(Apply) + slots * 4 * sizeof(void*));
    if (job == NULL) return make_error(frame, "gradax_factored_apply: out of memory");
    Apply* x = (Apply*)job->data;
    x->scalars = data_of(args[0]);
    x->b_first = data_of(args[1]);
    x->p = (void**)((char*)job->data + sizeof(Apply));
    x->g = x->p + n;
    x->a = x->g + n;
    x->b = x->a + n;
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer *p = args[2 + i], *g = args[2 + n + i], *ret = frame->rets.rets[i];
        if (!matrix(p) || !matrix(g) || rows_of(p) != rows_of(g) || cols_of(p) != cols_of(g) ||
            !vector_of((XLA_FFI_Buffer*)args[2 + 2 * n + i], rows_of(g)) ||
            !vector_of((XLA_FFI_Buffer*)args[2 + 3 * n + i], cols_of(g))) {
            free(job);
            return make_error(frame, "gradax_factored_apply: expected float32 params and grads [R, C], a [R], b [C]");
        }
        in_place(p->data, ret->data, num_elements(p), sizeof(float));
        x->p[i] = ret; /* updated in its result buffer (aliased to the params) */
        x->g[i] = g;
        x->a[i] = args[2 + 2 * n + i];
        x->b[i] = args[2 + 3 * n + i];
    }
    job->parts = parts_for(frame, row_offsets(job, x->g, n));
    job->run = apply_run;
    run_job(frame, job);
    release(job);
    return NULL;
}
