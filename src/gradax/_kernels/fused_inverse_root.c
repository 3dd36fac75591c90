/* gradax_inverse_pth_root: the inverse p-th root of symmetric positive semi-definite matrices by the coupled Newton
 * iteration of gradax.matrix_inverse_pth_root (Shampoo's preconditioner roots), one matrix at a time in the cache.
 *
 * For each matrix A (n x n), exactly the steps of the XLA function:
 *     lambda  = power iteration from v0 (at most 100 products, stopped at relative residual 1e-6)
 *     D       = A + ridge_epsilon max(lambda, 1e-16) I,   z = (1 + p) / (2 |D|_F)
 *     M_0     = z D,   H_0 = z^(1/p) I
 *     while i < num_iters, max|M - I| > error_tolerance and the error fell below 1.2 times the last one:
 *         T = (1 - a) I + a M  (a = -1/p),   M <- T^p M,   H <- H T
 *     the root: H, or the H before it when the last step made the error grow; and max|M - I|.
 * Every matrix of the iteration is a polynomial in A: symmetric, and any two of them commute. So each is kept
 * exactly symmetric: a product C = X Y is computed on its blocks on and above the diagonal and mirrored (about half
 * the multiply-adds), or, for M's update, in full and averaged with its transpose (see product); X is read by
 * columns as rows (X[k][i] = X[i][k]). The input is symmetrized first, (A + A^T) / 2 (no change to a symmetric
 * one). Products accumulate in float32 with fused multiply-adds, in order of k.
 *
 * Operands: args[0] a float32[..., n, n]; args[1] v0 float32[..., n], the power iteration's unit start vector
 * (leading size 1 or the batch's); args[2] float32[..., 4]: ridge_epsilon, error_tolerance, p, num_iters (leading
 * size 1 or the batch's); args[3] int32[1] flags: [0] 1: AVX-512 products, 0: the portable products (the same
 * order of work and roundings in plain C, for tests on any CPU). Results: float32[..., n, n] the roots, float32[...]
 * the errors.
 *
 * The matrices are padded with zeros to a multiple of 32 (padded rows and columns stay zero: the identity terms
 * are added on the first n diagonal entries only, and the errors read the n x n part). */
#define _GNU_SOURCE /* MADV_HUGEPAGE for the work space */
#include "fused_common.h"
#include "thread_space.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define GRADAX_AVX512 1
#include <immintrin.h>
#define AVX512_TARGET __attribute__((target("avx512f,fma")))
#else
#define GRADAX_AVX512 0
#endif

int gradax_avx512_available(void) { return fma_level() == FMA_AVX512; }

/* ---------------------------------------------------------------------------------------------------------- */
/* A block of MR rows by 32 columns of C = X Y over all K: X read as columns (xc points at X[0][i0], row stride ld:
 * the MR values of row k are X[i0..i0+MR)[k] by symmetry), Y's 32 columns packed K x 32 at yp; C's block at c (row
 * stride ld). Each element sums its K products in order, one fused multiply-add each. */

#define NR 32
#define MR_MAX 12

#if GRADAX_AVX512
#define GRADAX_BLOCK_AVX512(MR)                                                                                        \
    AVX512_TARGET static void block_avx512_##MR(const float* xc, const float* yp, int64_t K, int64_t ld, float* c) {  \
        __m512 lo[MR], hi[MR];                                                                                         \
        for (int r = 0; r < MR; ++r) lo[r] = hi[r] = _mm512_setzero_ps();                                              \
        for (int64_t k = 0; k < K; ++k) {                                                                              \
            __m512 y0 = _mm512_load_ps(yp + k * NR), y1 = _mm512_load_ps(yp + k * NR + 16);                            \
            const float* x = xc + k * ld;                                                                              \
            for (int r = 0; r < MR; ++r) {                                                                             \
                __m512 v = _mm512_set1_ps(x[r]);                                                                       \
                lo[r] = _mm512_fmadd_ps(v, y0, lo[r]);                                                                 \
                hi[r] = _mm512_fmadd_ps(v, y1, hi[r]);                                                                 \
            }                                                                                                          \
        }                                                                                                              \
        for (int r = 0; r < MR; ++r) {                                                                                 \
            _mm512_storeu_ps(c + r * ld, lo[r]);                                                                       \
            _mm512_storeu_ps(c + r * ld + 16, hi[r]);                                                                  \
        }                                                                                                              \
    }
GRADAX_BLOCK_AVX512(4)
GRADAX_BLOCK_AVX512(8)
GRADAX_BLOCK_AVX512(12)

static void block_avx512(const float* xc, const float* yp, int64_t K, int64_t ld, float* c, int rows) {
    if (rows == 12) block_avx512_12(xc, yp, K, ld, c);
    else if (rows == 8) block_avx512_8(xc, yp, K, ld, c);
    else block_avx512_4(xc, yp, K, ld, c);
}
#endif

static void block_portable(const float* xc, const float* yp, int64_t K, int64_t ld, float* c, int rows) {
    for (int r = 0; r < rows; ++r) {
        float acc[NR] = {0};
        for (int64_t k = 0; k < K; ++k)
            for (int j = 0; j < NR; ++j) acc[j] = fmaf(xc[k * ld + r], yp[k * NR + j], acc[j]);
        memcpy(c + r * ld, acc, sizeof(acc));
    }
}

typedef void (*BlockFn)(const float*, const float*, int64_t, int64_t, float*, int);

/* C = X Y (all N x N; X and Y symmetric and commuting, so C is symmetric but for rounding), through the packed
 * panel yp (N x 32). `average`: every block, then C <- (C + C^T) / 2; otherwise the blocks on and above the
 * diagonal, mirrored. Averaging costs twice the multiply-adds; taken for M's update, T^p M, it makes the root more
 * accurate than the unsymmetrized XLA iteration's (mirrored there, about half as accurate; tests/test_linear_algebra.py),
 * while H's update and the squarings (which are symmetric as computed) are mirrored at no loss. */
static void product(const float* X, const float* Y, float* C, int64_t N, float* yp, BlockFn block, int average) {
    for (int64_t j0 = 0; j0 < N; j0 += NR) {
        for (int64_t k = 0; k < N; ++k) memcpy(yp + k * NR, Y + k * N + j0, NR * sizeof(float));
        int64_t end = average ? N : j0 + NR; /* all row blocks, or those that reach the diagonal block */
        for (int64_t i0 = 0; i0 < end; i0 += MR_MAX) {
            int rows = end - i0 < MR_MAX ? (int)(end - i0) : MR_MAX; /* 12, 8 or 4: N and end are multiples of 32 */
            block(X + i0, yp, N, N, C + i0 * N + j0, rows);
        }
    }
    for (int64_t i = 1; i < N; ++i) /* below the diagonal */
        for (int64_t j = 0; j < i; ++j) {
            float v = average ? (C[i * N + j] + C[j * N + i]) * 0.5f : C[j * N + i];
            C[i * N + j] = C[j * N + i] = v;
        }
}

/* ---------------------------------------------------------------------------------------------------------- */

static float norm(const float* v, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += v[i] * v[i];
    return sqrtf(s);
}

/* out = A v for a symmetric A (N x N): the rows of A weighted by v, added in order (vectorizes across the row) */
static void matvec(const float* A, const float* v, float* out, int64_t n, int64_t N) {
    for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
        const float* row = A + k * N;
        float w = v[k];
        for (int64_t i = 0; i < n; ++i) out[i] += w * row[i];
    }
}

/* The largest eigenvalue by power iteration, as gradax.power_iteration (100 products, tolerance 1e-6). */
static float largest_eigenvalue(const float* A, const float* v0, int64_t n, int64_t N, float* vec, float* prod) {
    memcpy(vec, v0, (size_t)n * sizeof(float));
    matvec(A, vec, prod, n, N);
    float eig = 0.0f;
    for (int i = 0;; ++i) {
        float r = 0.0f;
        for (int64_t e = 0; e < n; ++e) {
            float d = prod[e] - eig * vec[e];
            r += d * d;
        }
        if (fabsf(sqrtf(r) / eig) < 1e-6f || i >= 100) return eig;
        float inv = 1.0f / norm(prod, n);
        for (int64_t e = 0; e < n; ++e) vec[e] = inv * prod[e];
        matvec(A, vec, prod, n, N);
        float dot = 0.0f;
        for (int64_t e = 0; e < n; ++e) dot += vec[e] * prod[e];
        eig = dot;
    }
}

/* max |M - I| over the n x n part */
static float distance_to_identity(const float* M, int64_t n, int64_t N) {
    float worst = 0.0f;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
            float d = fabsf(M[i * N + j] - (i == j ? 1.0f : 0.0f));
            worst = d > worst || d != d ? d : worst; /* a NaN stays (jnp.max propagates it) */
        }
    return worst;
}

typedef struct {
    float *a, *m, *nm, *h, *nh, *ph, *t, *s1, *s2, *yp, *vec, *prod;
} Work;

static int work_init(Work* w, int64_t N) {
    size_t mat = up64((size_t)(N * N) * 4), vec = up64((size_t)N * 4);
    char* base = (char*)thread_space(9 * mat + up64((size_t)(N * NR) * 4) + 2 * vec);
    if (base == NULL) return 0;
    float** mats[9] = {&w->a, &w->m, &w->nm, &w->h, &w->nh, &w->ph, &w->t, &w->s1, &w->s2};
    for (int k = 0; k < 9; ++k, base += mat) *mats[k] = (float*)base;
    w->yp = (float*)base;
    base += up64((size_t)(N * NR) * 4);
    w->vec = (float*)base;
    w->prod = (float*)(base + vec);
    return 1;
}

static void swap(float** a, float** b) {
    float* t = *a;
    *a = *b;
    *b = t;
}

/* One matrix: in (n x n, row-major) -> root (n x n), *error. params: ridge_epsilon, error_tolerance, p, num_iters */
static void inverse_root(Work* w, const float* in, const float* v0, const float* params, int64_t n, float* root,
                         float* error, BlockFn block) {
    int64_t N = (n + NR - 1) / NR * NR;
    float ridge_epsilon = params[0], tolerance = params[1], p = params[2], num_iters = params[3];
    memset(w->a, 0, (size_t)(N * N) * 4);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) w->a[i * N + j] = (in[i * n + j] + in[j * n + i]) * 0.5f;

    float lambda = largest_eigenvalue(w->a, v0, n, N, w->vec, w->prod);
    float ridge = ridge_epsilon * (lambda > 1e-16f || lambda != lambda ? lambda : 1e-16f);
    for (int64_t i = 0; i < n; ++i) w->a[i * N + i] += ridge; /* D */
    float z = (1.0f + p) / (2.0f * norm(w->a, N * N));
    float alpha = (float)(-1.0 / (double)p);
    float h0 = powf(z, (float)(1.0 / (double)p));
    memset(w->h, 0, (size_t)(N * N) * 4);
    for (int64_t e = 0; e < N * N; ++e) w->m[e] = w->a[e] * z;
    for (int64_t i = 0; i < n; ++i) w->h[i * N + i] = h0;
    memcpy(w->ph, w->h, (size_t)(N * N) * 4);
    float err = distance_to_identity(w->m, n, N);
    float squarings = roundf(log2f(p));
    int doublings = squarings > 3.0f ? 3 : (squarings >= 0.0f ? (int)squarings : 0); /* lax.switch clamps */
    int improving = 1;
    for (int64_t i = 0; (float)i < num_iters && err > tolerance && improving; ++i) {
        for (int64_t e = 0; e < N * N; ++e) w->t[e] = alpha * w->m[e];
        for (int64_t d = 0; d < n; ++d) w->t[d * N + d] += 1.0f - alpha;
        const float* tp = w->t; /* T^(2^doublings) */
        for (int k = 0; k < doublings; ++k) {
            float* out = tp == w->s1 ? w->s2 : w->s1;
            product(tp, tp, out, N, w->yp, block, 0);
            tp = out;
        }
        product(tp, w->m, w->nm, N, w->yp, block, 1);
        product(w->h, w->t, w->nh, N, w->yp, block, 0);
        float next = distance_to_identity(w->nm, n, N);
        improving = next < err * 1.2f;
        err = next;
        swap(&w->m, &w->nm);
        swap(&w->ph, &w->h); /* ph <- h, h <- nh */
        swap(&w->h, &w->nh);
    }
    const float* H = improving ? w->h : w->ph;
    for (int64_t i = 0; i < n; ++i) memcpy(root + i * n, H + i * N, (size_t)n * 4);
    *error = distance_to_identity(w->m, n, N);
}

/* ---------------------------------------------------------------------------------------------------------- */

typedef struct {
    const float *in, *v0, *params;
    float *root, *error;
    int64_t n, v0_stride, params_stride;
    int avx512;
    atomic_int failed; /* a part that could not allocate its work space */
} InverseRoot;

/* One matrix of the batch (run_per_matrix). */
static void inverse_root_part(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    (void)lo;
    (void)hi;
    InverseRoot* ir = (InverseRoot*)job->data;
    int64_t n = ir->n, N = (n + NR - 1) / NR * NR;
    Work w;
    if (!work_init(&w, N)) {
        atomic_store(&ir->failed, 1);
        return;
    }
    BlockFn block = block_portable;
#if GRADAX_AVX512
    if (ir->avx512) block = block_avx512;
#endif
    inverse_root(&w, ir->in + leaf * n * n, ir->v0 + leaf * ir->v0_stride, ir->params + leaf * ir->params_stride, n,
                 ir->root + leaf * n * n, ir->error + leaf, block);
    trim_space();
}

XLA_FFI_Error* gradax_inverse_pth_root(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    if (frame->args.size != 4 || frame->rets.size != 2)
        return make_error(frame, "gradax_inverse_pth_root: expected 4 operands and 2 results");
    for (int64_t i = 0; i < 4; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_inverse_pth_root: every operand must be a buffer");
    XLA_FFI_Buffer *a = frame->args.args[0], *v0 = frame->args.args[1], *pr = frame->args.args[2];
    XLA_FFI_Buffer *fl = frame->args.args[3], *root = frame->rets.rets[0], *err = frame->rets.rets[1];
    if (a->dtype != XLA_FFI_DataType_F32 || root->dtype != XLA_FFI_DataType_F32 || a->rank < 2 ||
        a->dims[a->rank - 1] != a->dims[a->rank - 2] || num_elements(root) != num_elements(a))
        return make_error(frame, "gradax_inverse_pth_root: expected float32 square matrices [..., n, n] and roots alike");
    int64_t n = a->dims[a->rank - 1];
    int64_t batch = n > 0 ? num_elements(a) / (n * n) : 0;
    if (err->dtype != XLA_FFI_DataType_F32 || num_elements(err) != batch)
        return make_error(frame, "gradax_inverse_pth_root: expected float32 errors [...], one per matrix");
    if (v0->dtype != XLA_FFI_DataType_F32 || (num_elements(v0) != n && num_elements(v0) != n * batch))
        return make_error(frame, "gradax_inverse_pth_root: expected a float32 start vector [..., n]");
    if (pr->dtype != XLA_FFI_DataType_F32 || (num_elements(pr) != 4 && num_elements(pr) != 4 * batch))
        return make_error(frame, "gradax_inverse_pth_root: expected float32 parameters [..., 4]");
    if (fl->dtype != XLA_FFI_DataType_S32 || num_elements(fl) < 1)
        return make_error(frame, "gradax_inverse_pth_root: expected int32 flags [1]");
    int avx512 = ((const int32_t*)fl->data)[0] != 0;
    if (avx512 && !gradax_avx512_available())
        return make_error(frame, "gradax_inverse_pth_root: this CPU has no AVX-512");
    if (batch == 0) return NULL;
    Job* job = new_job(batch, sizeof(InverseRoot));
    if (job == NULL) return make_error(frame, "gradax_inverse_pth_root: out of memory");
    InverseRoot* ir = (InverseRoot*)job->data;
    *ir = (InverseRoot){(const float*)a->data, (const float*)v0->data, (const float*)pr->data, (float*)root->data,
                        (float*)err->data, n, num_elements(v0) == n ? 0 : n, num_elements(pr) == 4 ? 0 : 4, avx512};
    atomic_init(&ir->failed, 0);
    run_per_matrix(frame, job, batch, inverse_root_part);
    int failed = atomic_load(&ir->failed);
    release(job);
    return failed ? make_error(frame, "gradax_inverse_pth_root: out of memory") : NULL;
}
