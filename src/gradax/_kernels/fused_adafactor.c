/* The factored matrices of an Adafactor step (gradax.fused.adafactor), called from XLA through its FFI.
 *
 * gradax_adafactor_matrices: args[0] float32[NA] (enum AdafactorScalar, fused_scalars.h: beta, eps, clipping threshold
 *   (0: none), learning rate, 1 to multiply by the parameter scale); args[1] float32[n], 1 where the second moment's normalized factor is the
 *   per-column one (the statistic averaged over axis 0); then per leaf i of n: args[2+i] float32 params [R, C],
 *   args[2+n+i] gradients [R, C], args[2+2n+i] float32[R] per-row statistic (the mean of g^2 over each row, as a
 *   moving average), args[2+3n+i] float32[C] per-column statistic. rets: the new params, per-row and per-column
 *   statistics, each aliased to its operand (updated in place).
 *
 * XLA:CPU spends five passes over such a leaf's gradient (row means, column means, the clipping RMS, the
 * parameters' RMS, the update). Here each matrix takes two, one matrix after the other, each split by rows over
 * XLA's thread pool:
 *   1. per row: the sum of g^2, hence the row's new statistic R_i; then, per column, the sums of g^2 and of
 *      g^2 / R_i (float32 over blocks of 8 rows, then float64); and the sum of p^2.
 *      The squared norm of the unclipped update, sum_ij g_ij^2 a_i^2 b_j^2, needs no pass of its own: a_i^2 is
 *      1 / R_i up to a constant (the mean of R where the rows are normalized), so it is
 *      const * sum_j b_j^2 sum_i g_ij^2 / R_i, with b known once the column sums are.
 *   then the new column statistics and the two factors (vectors, on the calling thread);
 *   2. p <- p - (((g x) y / div) lr) ps, with (x, y) the normalized factor first, in place.
 * That is 20 B/param (read g and p, then read g and p and write p), the least the math allows: the update needs
 * the new statistics, which need all of the gradient. Matrix by matrix, pass 2 finds g and p in the last-level
 * cache when the matrix fits there (a GPT-2 block's matrices do): memory is then read once.
 */
#include "fused_common.h"

static int matrix(const XLA_FFI_Buffer* b) { return b->rank == 2 && b->dtype == XLA_FFI_DataType_F32; }

static int64_t rows_of(const XLA_FFI_Buffer* b) { return b->dims[0]; }
static int64_t cols_of(const XLA_FFI_Buffer* b) { return b->dims[1]; }

static int vector_of(const XLA_FFI_Buffer* v, int64_t size) {
    return v->dtype == XLA_FFI_DataType_F32 && num_elements(v) == size;
}

/* sum of x_j^2 over a row, in 16 float32 lanes (vectorized) combined in float64 */
static inline double row_sum_squares(const float* restrict x, int64_t C) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= C; j += 16)
        for (int k = 0; k < 16; ++k) acc[k] += x[j + k] * x[j + k];
    double total = 0.0;
    for (int k = 0; k < 16; ++k) total += acc[k];
    for (; j < C; ++j) total += (double)x[j] * x[j];
    return total;
}

/* One matrix of the call: its operands, the factors and the partial sums of its passes. */
typedef struct {
    float* p;
    const float* g;
    int64_t R, C;
    int b_first;
    float* row_stat;  /* [R]: the per-row statistic, updated in pass 1 */
    float *a, *b;     /* [R], [C]: the factors */
    double* cols;     /* [MAX_PARTS][C]: per part, the column sums of g^2 (of float32 sums over BLOCK_ROWS rows) */
    double* wcols;    /* [MAX_PARTS][C]: per part, the column sums of g^2 / R_i (likewise) */
    double* partial;  /* [MAX_PARTS]: per part, the sum of p^2 */
    float beta, eps;
    float div, lr, ps;
} Matrix;

/* float32 moving average of a mean of squares, as the chain computes it */
static inline float moving(float old, float sum, float count, float beta, float eps) {
    return beta * old + (1.0f - beta) * (sum / count + eps);
}

#define BLOCK_ROWS 8 /* rows whose column sums are added in float32 before the float64 accumulators */

GRADAX_CLONES
static double sums_span(const float* restrict g, const float* restrict p, int64_t C, float* restrict row_stat,
                        double* restrict cols, double* restrict wcols, float beta, float eps, int64_t lo,
                        int64_t hi) {
    double params = 0.0;
    for (int64_t i0 = lo; i0 < hi; i0 += BLOCK_ROWS) {
        const int rows = hi - i0 < BLOCK_ROWS ? (int)(hi - i0) : BLOCK_ROWS;
        float w[BLOCK_ROWS];
        for (int k = 0; k < rows; ++k) {
            int64_t i = i0 + k;
            row_stat[i] = moving(row_stat[i], (float)row_sum_squares(g + i * C, C), (float)C, beta, eps);
            w[k] = 1.0f / row_stat[i];
            params += row_sum_squares(p + i * C, C);
        }
        const float* restrict block = g + i0 * C; /* its rows are still in the first- or second-level cache */
        int64_t j0 = 0;
        for (; j0 + 64 <= C; j0 += 64) {
            float sq[64] = {0}, weighted[64] = {0};
            for (int k = 0; k < rows; ++k) {
                const float* restrict x = block + k * C + j0;
                const float wk = w[k];
                for (int j = 0; j < 64; ++j) {
                    float x2 = x[j] * x[j];
                    sq[j] += x2;
                    weighted[j] += x2 * wk;
                }
            }
            for (int j = 0; j < 64; ++j) {
                cols[j0 + j] += sq[j];
                wcols[j0 + j] += weighted[j];
            }
        }
        for (; j0 < C; ++j0)
            for (int k = 0; k < rows; ++k) {
                double x2 = (double)block[k * C + j0] * block[k * C + j0];
                cols[j0] += x2;
                wcols[j0] += x2 * w[k];
            }
    }
    return params;
}

static void sums_run(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)leaf;
    Matrix* m = (Matrix*)job->data;
    size_t at = (size_t)part * (size_t)m->C;
    m->partial[part] +=
        sums_span(m->g, m->p, m->C, m->row_stat, m->cols + at, m->wcols + at, m->beta, m->eps, lo, hi);
}

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
    (void)part, (void)leaf;
    Matrix* m = (Matrix*)job->data;
    apply_span(m->p, m->g, m->a, m->b, m->C, m->b_first, m->div, m->lr, m->ps, lo, hi);
}

/* One pass over the rows of m, split over the pool (on the calling thread alone if no job can be allocated);
 * returns the sum of the parts' partial sums and sets *parts_used. */
static double pass(XLA_FFI_CallFrame* frame, Matrix* m, void (*run)(Job*, int, int64_t, int64_t, int64_t),
                   int* parts_used) {
    memset(m->partial, 0, MAX_PARTS * sizeof(double));
    int parts = 1;
    Job* job = new_job(1, 0);
    if (job == NULL) {
        Job alone;
        memset(&alone, 0, sizeof(alone));
        alone.data = m;
        run(&alone, 0, 0, 0, m->R);
    } else {
        job->offset[0] = 0;
        job->offset[1] = m->R;
        job->parts = parts = parts_for(frame, m->R * m->C);
        job->data = m; /* read by parts only: a task that starts late finds no part and touches nothing else */
        job->run = run;
        run_job(frame, job);
        release(job);
    }
    double total = 0.0;
    for (int k = 0; k < parts; ++k) total += m->partial[k];
    if (parts_used != NULL) *parts_used = parts;
    return total;
}

/* factor[k] = (stat[k] / mean(stat))^-1/2 when normalized, else stat[k]^-1/2; returns the mean (1 when not
 * normalized) */
static float factors(const float* stat, int64_t size, int normalized, float* factor) {
    float mean = 1.0f;
    if (normalized) {
        double total = 0.0;
        for (int64_t k = 0; k < size; ++k) total += stat[k];
        mean = (float)(total / (double)size);
    }
    for (int64_t k = 0; k < size; ++k) factor[k] = 1.0f / sqrtf(normalized ? stat[k] / mean : stat[k]);
    return mean;
}

/* The whole step of one matrix; 0 when out of memory. */
static int step_matrix(XLA_FFI_CallFrame* frame, Matrix* m, float* col_stat, const float* s) {
    const float clip = s[A_CLIPPING_THRESHOLD];
    size_t R = (size_t)m->R, C = (size_t)m->C;
    char* scratch = (char*)calloc(1, (MAX_PARTS * (1 + 2 * C)) * sizeof(double) + (R + C) * sizeof(float));
    if (scratch == NULL) return 0;
    m->partial = (double*)scratch;
    m->cols = m->partial + MAX_PARTS;
    m->wcols = m->cols + MAX_PARTS * C;
    m->a = (float*)(m->wcols + MAX_PARTS * C);
    m->b = m->a + R;
    m->beta = s[A_BETA];
    m->eps = s[A_EPS];
    int parts = 1;
    double param_squares = pass(frame, m, sums_run, &parts);
    /* the column statistics, and sum_i g_ij^2 / R_i per column (into cols[0..C) and wcols[0..C)) */
    for (size_t j = 0; j < C; ++j) {
        double total = 0.0, weighted = 0.0;
        for (int k = 0; k < parts; ++k) {
            total += m->cols[(size_t)k * C + j];
            weighted += m->wcols[(size_t)k * C + j];
        }
        col_stat[j] = moving(col_stat[j], (float)total, (float)R, m->beta, m->eps);
        m->wcols[j] = weighted;
    }
    float row_mean = factors(m->row_stat, m->R, !m->b_first, (float*)m->a);
    factors(col_stat, m->C, m->b_first, (float*)m->b);
    float size = (float)(m->R * m->C);
    m->div = 1.0f;
    if (clip > 0.0f) { /* sum_ij g_ij^2 a_i^2 b_j^2, with a_i^2 = row_mean / R_i */
        double total = 0.0;
        for (size_t j = 0; j < C; ++j) total += m->wcols[j] * ((double)m->b[j] * m->b[j]);
        float rms = sqrtf((float)(total * row_mean) / size);
        m->div = fmaxf(1.0f, rms / clip);
    }
    m->ps = 1.0f;
    if (s[A_PARAMETER_SCALE] != 0.0f) {
        float root = sqrtf((float)param_squares / size);
        m->ps = root <= 1e-3f ? 1e-3f : root;
    }
    m->lr = s[A_LEARNING_RATE];
    pass(frame, m, apply_run, NULL);
    free(scratch);
    return 1;
}

XLA_FFI_Error* gradax_adafactor_matrices(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs < 2 || (nargs - 2) % 4 != 0 || frame->rets.size != 3 * ((nargs - 2) / 4))
        return make_error(frame, "gradax_adafactor_matrices: expected 2 + 4n operands and 3n results");
    int64_t n = (nargs - 2) / 4;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    for (int64_t i = 0; i < nargs; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_adafactor_matrices: operands must be buffers");
    if (!vector_of((XLA_FFI_Buffer*)args[0], NA) || !vector_of((XLA_FFI_Buffer*)args[1], n))
        return make_error(frame, "gradax_adafactor_matrices: expected float32[NA] scalars and float32[n] orders");
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer *p = args[2 + i], *g = args[2 + n + i];
        if (!matrix(p) || !matrix(g) || rows_of(p) != rows_of(g) || cols_of(p) != cols_of(g) ||
            !vector_of((XLA_FFI_Buffer*)args[2 + 2 * n + i], rows_of(g)) ||
            !vector_of((XLA_FFI_Buffer*)args[2 + 3 * n + i], cols_of(g)))
            return make_error(frame, "gradax_adafactor_matrices: expected float32 params and grads [R, C], "
                                     "statistics [R] and [C]");
    }
    const float* scalars = data_of(args[0]);
    const float* b_first = data_of(args[1]);
    for (int64_t i = 0; i < n; ++i) {
        XLA_FFI_Buffer *p = args[2 + i], *g = args[2 + n + i];
        Matrix m;
        memset(&m, 0, sizeof(m));
        m.R = rows_of(g);
        m.C = cols_of(g);
        if (m.R * m.C == 0) continue;
        m.p = in_place(p->data, data_of(rets[i]), m.R * m.C, sizeof(float));
        m.g = (const float*)g->data;
        m.b_first = b_first[i] != 0.0f;
        m.row_stat = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), m.R, sizeof(float));
        float* col_stat = in_place(data_of(args[2 + 3 * n + i]), data_of(rets[2 * n + i]), m.C, sizeof(float));
        if (!step_matrix(frame, &m, col_stat, scalars))
            return make_error(frame, "gradax_adafactor_matrices: out of memory");
    }
    return NULL;
}
