/* The factored second moments of Adafactor (gradax.adafactor's scale_by_factored_rms) and CAME
 * (gradax.contrib.scale_by_came) on float32 matrices, called from XLA through its FFI.
 *
 * Adafactor (gradax_factored_moments, at the end of the file): XLA alone reads g three times for the row means, the
 * column means and the clipping sum; pass A below does all three in one reading. CAME (gradax_came_matrices):
 * XLA:CPU cannot share one pass over a matrix between a reduction along rows and one along columns, and
 * scale_by_came's step in XLA alone reads g six times and m four (the row and column means of g^2, the clipping
 * sum, the new momentum, the two instability means, the update). Here each matrix goes through two passes, the
 * second reading the g the first just read, still in the cache:
 *   A. (reads g) per row i the mean of g^2, so r_i' = b2 r_i + (1-b2)(mean + eps1) at once; per column, partial
 *      sums of g^2 and of g^2 / r_i'. Then c_j' = b2 c_j + (1-b2)(colmean + eps1), and the update's sum of squares
 *      sum_ij (g_ij rf_i cf_j)^2 = mean(r') sum_j (1 / c_j') sum_i g_ij^2 / r_i', with rf_i = (r_i' / mean(r'))^-1/2
 *      and cf_j = c_j'^-1/2 the factors, without a second reading of g (mean(c') in place of mean(r') where the
 *      column statistic is the one divided by its mean: Adafactor on a matrix taller than wide). For CAME, once
 *      every matrix of the leaf is through pass A, rf is divided by the leaf's clipping max(1, RMS(u) / d).
 *   B. (reads g and m, writes m) u = (g rf_i) cf_j, m' = b1 m + (1-b1) u, and the instability (u - m')^2: its row
 *      means give R_i' = b3 R_i + (1-b3)(mean + eps2) at once, its column sums C_j' after the pass.
 * The update, m' (R_i' / mean(R'))^-1/2 C_j'^-1/2, is left to XLA, which fuses it with the rest of the step (weight
 * decay, learning rate, apply_updates) into one pass: an update written here would be a new array the size of the
 * params, a temporary buffer XLA:CPU allocates afresh at each step.
 *
 * That is the arithmetic of scale_by_came (contrib/_came.py), with its roundings for each element; the sums are in
 * another order (row sums in 16 float32 lanes added in float64, column sums over blocks of BLOCK_ROWS rows in
 * float32 added in float64), so the statistics differ from XLA's by float32 rounding.
 *
 * Leaves under SPLIT_ELEMENTS elements are taken whole, one per thread at a time (largest first), both passes in a
 * row; each pass over a larger one is split over the threads (by matrix, and by rows where it has fewer matrices
 * than threads), the column sums of each part added in part order (the same numbers whichever thread ran a part).
 *
 * gradax_came_matrices operands, for n leaves, each of B matrices [..., R, C] (B the product of the leading
 * dimensions; float32 throughout):
 *   args[0]        float32[NCM] step scalars (enum CameScalar, fused_scalars.h)
 *   args[1+i]      g [..., R, C],  args[1+n+i] m [..., R, C],  args[1+2n+i] row statistic r [..., R],
 *   args[1+3n+i]   column statistic c [..., C],  args[1+4n+i] instability rows [..., R],
 *   args[1+5n+i]   instability columns [..., C]
 *   rets[i]        the new m; rets[n+i] .. rets[4n+i] the new r, c and instability rows and columns, each aliased to
 *                  its operand (in place)
 */
#include "fused_common.h"

/* a matrix of at least this many elements is split over the threads by rows (4 MiB of g) */
#define SPLIT_ELEMENTS (1 << 20)
/* column sums: float32 over blocks of this many rows, each block's sums added in float64 */
#define BLOCK_ROWS 32

typedef struct Matrix Matrix;
struct Matrix {
    const float* g;
    float *m, *vr, *vc, *rr, *rc; /* in place */
    int64_t R, C;
    int parts;    /* row ranges (1: the matrix is taken whole) */
    float* cf;    /* [C] the second moment's column factor */
    double* acc;  /* [parts][3][C] the column sums of g^2, of g^2 / r', of the instability */
    float* blk;   /* [parts][3][C] their float32 block sums */
    double* sums; /* [parts] the sum of r' over the part's rows */
    int normalize_rows; /* 1: the row statistic is the one divided by its mean (CAME; Adafactor where R <= C) */
    double sum_sq;      /* of the update before clipping */
    float mean_vr, clip;
};

typedef struct Came Came;
struct Came {
    float s[NCM];
    int passes; /* 2: CAME's step; 1: pass A alone (Adafactor's second moment, gradax_factored_moments) */
    Matrix* mats;
    struct Leaf* leaves;
    int64_t* order; /* the leaves taken whole, largest first */
    void (*pass_a)(const float* s, Matrix* M, int k, int64_t i0, int64_t i1);
    void (*pass_b)(const float* s, Matrix* M, int k, int64_t i0, int64_t i1);
};

/* sum of the 16 lanes in float64 */
static inline double lanes_sum(const float* lanes) {
    double t = 0.0;
    for (int l = 0; l < 16; ++l) t += (double)lanes[l];
    return t;
}

/* adds the float32 block sums into the float64 sums and clears them */
static inline void flush(float* restrict blk, double* restrict acc, int64_t C) {
    for (int64_t j = 0; j < C; ++j) {
        acc[j] += (double)blk[j];
        blk[j] = 0.0f;
    }
}

static inline __attribute__((always_inline)) void pass_a_body(const float* s, Matrix* M, int k, int64_t i0,
                                                              int64_t i1, const int fused) {
    const int64_t C = M->C;
    const float b2 = s[CM_B2], omb2 = s[CM_ONE_MINUS_B2], e1 = s[CM_EPS1], fc = (float)C;
    float* restrict col = M->blk + (size_t)k * 3 * C;
    float* restrict w = col + C;
    double* restrict dcol = M->acc + (size_t)k * 3 * C;
    double* restrict dw = dcol + C;
    double total = 0.0;
    for (int64_t i = i0; i < i1; ++i) {
        const float* restrict g = M->g + i * C;
        float lanes[16] = {0};
        int64_t j = 0;
        for (; j + 16 <= C; j += 16)
            for (int l = 0; l < 16; ++l) lanes[l] = muladd(g[j + l], g[j + l], lanes[l], fused);
        for (; j < C; ++j) lanes[j & 15] = muladd(g[j], g[j], lanes[j & 15], fused);
        const float mean = (float)lanes_sum(lanes) / fc;
        const float r = b2 * M->vr[i] + omb2 * (mean + e1);
        M->vr[i] = r;
        total += (double)r;
        const float inv = 1.0f / r;
        for (j = 0; j < C; ++j) {
            const float q = g[j] * g[j];
            col[j] += q;
            w[j] = muladd(q, inv, w[j], fused);
        }
        if ((i - i0) % BLOCK_ROWS == BLOCK_ROWS - 1 || i + 1 == i1) {
            flush(col, dcol, C);
            flush(w, dw, C);
        }
    }
    M->sums[k] = total;
}

/* element j of pass B: the new momentum (stored), the instability (added to the column's block sum, returned) */
static inline __attribute__((always_inline)) float momentum(const float* restrict g, float* restrict m,
                                                            const float* restrict cf, float* restrict col, int64_t j,
                                                            float rf, float b1, float omb1, const int fused) {
    const float u = (g[j] * rf) * cf[j];
    const float mn = muladd(b1, m[j], omb1 * u, fused);
    m[j] = mn;
    const float d = u - mn, q = d * d;
    col[j] += q;
    return q;
}

static inline __attribute__((always_inline)) void pass_b_body(const float* s, Matrix* M, int k, int64_t i0,
                                                              int64_t i1, const int fused) {
    const int64_t C = M->C;
    const float b1 = s[CM_B1], omb1 = s[CM_ONE_MINUS_B1], b3 = s[CM_B3], omb3 = s[CM_ONE_MINUS_B3];
    const float e2 = s[CM_EPS2], fc = (float)C, mean_vr = M->mean_vr, clip = M->clip;
    const float* restrict cf = M->cf;
    float* restrict col = M->blk + (size_t)k * 3 * C + 2 * C;
    double* restrict dcol = M->acc + (size_t)k * 3 * C + 2 * C;
    for (int64_t i = i0; i < i1; ++i) {
        const float* restrict g = M->g + i * C;
        float* restrict m = M->m + i * C;
        const float rf = (1.0f / sqrtf(M->vr[i] / mean_vr)) / clip;
        float lanes[16] = {0};
        int64_t j = 0;
        for (; j + 16 <= C; j += 16)
            for (int l = 0; l < 16; ++l) lanes[l] += momentum(g, m, cf, col, j + l, rf, b1, omb1, fused);
        for (; j < C; ++j) lanes[j & 15] += momentum(g, m, cf, col, j, rf, b1, omb1, fused);
        const float mean = (float)lanes_sum(lanes) / fc;
        const float r = b3 * M->rr[i] + omb3 * (mean + e2);
        M->rr[i] = r;
        if ((i - i0) % BLOCK_ROWS == BLOCK_ROWS - 1 || i + 1 == i1) flush(col, dcol, C);
    }
}

GRADAX_FMA_VARIANTS(pass_a, pass_a_body, (const float* s, Matrix* M, int k, int64_t i0, int64_t i1),
                    (s, M, k, i0, i1))
GRADAX_FMA_VARIANTS(pass_b, pass_b_body, (const float* s, Matrix* M, int k, int64_t i0, int64_t i1),
                    (s, M, k, i0, i1))

/* After pass A over a matrix: the column statistic and factor, mean(r'), and the sum of squares of the update
 * (g / sqrt(r' c' / mean(the normalized one)), before clipping). */
static void after_a(const float* s, Matrix* M) {
    const int64_t R = M->R, C = M->C;
    const float b2 = s[CM_B2], omb2 = s[CM_ONE_MINUS_B2], e1 = s[CM_EPS1];
    double rows = 0.0, cols = 0.0, sum_sq = 0.0;
    for (int k = 0; k < M->parts; ++k) rows += M->sums[k];
    M->mean_vr = (float)(rows / (double)R);
    for (int64_t j = 0; j < C; ++j) {
        double col = 0.0, w = 0.0;
        for (int k = 0; k < M->parts; ++k) {
            col += M->acc[(size_t)k * 3 * C + j];
            w += M->acc[(size_t)k * 3 * C + C + j];
        }
        const float c = b2 * M->vc[j] + omb2 * ((float)(col / (double)R) + e1);
        M->vc[j] = c;
        M->cf[j] = 1.0f / sqrtf(c);
        sum_sq += w / (double)c;
        cols += (double)c;
    }
    M->sum_sq = sum_sq * (M->normalize_rows ? (double)M->mean_vr : cols / (double)C);
}

/* Once every matrix of a leaf is through pass A: the leaf's clipping divisor max(1, RMS(u) / d), over the whole
 * leaf as scale_by_came's (NaN kept, as XLA's maximum). */
static void clip_leaf(const float* s, Matrix* first, int64_t B) {
    double sum_sq = 0.0;
    for (int64_t b = 0; b < B; ++b) sum_sq += first[b].sum_sq;
    const double size = (double)B * (double)first->R * (double)first->C;
    const float ratio = sqrtf((float)(sum_sq / size)) / s[CM_CLIP_THRESHOLD];
    const float clip = ratio > 1.0f ? ratio : (ratio != ratio ? ratio : 1.0f);
    for (int64_t b = 0; b < B; ++b) first[b].clip = clip;
}

/* After pass B: the instability's column statistic. */
static void after_b(const float* s, Matrix* M) {
    const int64_t R = M->R, C = M->C;
    const float b3 = s[CM_B3], omb3 = s[CM_ONE_MINUS_B3], e2 = s[CM_EPS2];
    for (int64_t j = 0; j < C; ++j) {
        double col = 0.0;
        for (int k = 0; k < M->parts; ++k) col += M->acc[(size_t)k * 3 * C + 2 * C + j];
        const float c = b3 * M->rc[j] + omb3 * ((float)(col / (double)R) + e2);
        M->rc[j] = c;
    }
}

/* A leaf: its B matrices mats[first .. first + B) (B = 0 for an empty leaf). */
typedef struct Leaf Leaf;
struct Leaf {
    int64_t first, B;
    int split; /* 0: taken whole by one thread; 1: each pass split over the threads, `parts` per matrix */
    int parts; /* row ranges per matrix */
};

/* A whole leaf by one thread: pass A over its matrices, the clipping, then pass B over them. */
static void whole_run(Job* job, int part, int64_t index, int64_t lo, int64_t hi) {
    (void)part, (void)lo, (void)hi;
    Came* a = *(Came**)job->data;
    const Leaf* L = &a->leaves[a->order[index]];
    Matrix* first = &a->mats[L->first];
    for (int64_t b = 0; b < L->B; ++b) {
        a->pass_a(a->s, &first[b], 0, 0, first[b].R);
        after_a(a->s, &first[b]);
    }
    if (a->passes == 1) return;
    clip_leaf(a->s, first, L->B);
    for (int64_t b = 0; b < L->B; ++b) {
        a->pass_b(a->s, &first[b], 0, 0, first[b].R);
        after_b(a->s, &first[b]);
    }
}

typedef struct Split Split;
struct Split {
    Came* a;
    Matrix* first; /* the leaf's first matrix */
    int parts;     /* per matrix */
    int pass;
};

/* One row range of one matrix (part `index`: matrix index / parts, range index % parts) in one pass over a split
 * leaf. */
static void split_run(Job* job, int part, int64_t index, int64_t lo, int64_t hi) {
    (void)part, (void)lo, (void)hi;
    Split* t = (Split*)job->data;
    Matrix* M = &t->first[index / t->parts];
    const int k = (int)(index % t->parts);
    const int64_t i0 = M->R * k / t->parts, i1 = M->R * (k + 1) / t->parts;
    if (t->pass == 0) t->a->pass_a(t->a->s, M, k, i0, i1);
    else t->a->pass_b(t->a->s, M, k, i0, i1);
}

/* Whether a leaf of B matrices [R, C] is split over the threads (at least SPLIT_ELEMENTS elements), and then its
 * row ranges per matrix: 1 where its matrices alone are enough parts for the threads. */
static int split_leaf(int64_t B, int64_t R, int64_t C, int threads) {
    return threads > 1 && B * R * C >= SPLIT_ELEMENTS;
}

static int parts_per_matrix(int64_t B, int64_t R, int64_t C, int threads) {
    if (!split_leaf(B, R, C, threads) || B >= threads) return 1;
    return R < threads ? (int)(R > 0 ? R : 1) : threads;
}

static int64_t leaf_size(const Came* a, int64_t leaf) {
    const Leaf* L = &a->leaves[leaf];
    return L->B == 0 ? 0 : L->B * a->mats[L->first].R * a->mats[L->first].C;
}

/* Runs `count` parts, part k calling run(job, k, k, 0, 16) (leaves of 16 elements: one part each), on at most
 * `threads` threads; `data` (copied into the job) is what run reads. Returns -1 when out of memory. */
static int run_parts(XLA_FFI_CallFrame* frame, int64_t count, int threads, const void* data, size_t size,
                     void (*run)(Job*, int, int64_t, int64_t, int64_t)) {
    Job* job = new_job(count, size);
    if (job == NULL) return -1;
    memcpy(job->data, data, size);
    for (int64_t b = 0; b <= count; ++b) job->offset[b] = 16 * b;
    job->run = run;
    job->parts = (int)count;
    job->workers = threads < count ? threads : (int)count;
    run_job(frame, job);
    release(job);
    return 0;
}

/* Whether `b` is float32 of shape lead + (last,): the first `rank - 1` dimensions of `lead`, then `last`. */
static int shaped(const XLA_FFI_Buffer* b, int64_t rank, const int64_t* lead, int64_t last) {
    if (b->dtype != XLA_FFI_DataType_F32 || b->rank != rank) return 0;
    for (int64_t d = 0; d + 1 < rank; ++d)
        if (b->dims[d] != lead[d]) return 0;
    return b->dims[rank - 1] == last;
}

/* A leaf's gradient [..., R, C]: B (the product of the leading dimensions), R, C; 0 if its rank is under 2. */
static int matrices_of(const XLA_FFI_Buffer* g, int64_t* B, int64_t* R, int64_t* C) {
    if (g->rank < 2) return 0;
    *B = 1;
    for (int64_t d = 0; d + 2 < g->rank; ++d) *B *= g->dims[d];
    *R = g->dims[g->rank - 2], *C = g->dims[g->rank - 1];
    return 1;
}

/* A leaf's buffers: g [..., R, C] (its operand), and where the results are (in place): m (NULL for pass A alone),
 * the row and column statistics, the instability's (NULL for pass A alone). */
typedef struct LeafIn LeafIn;
struct LeafIn {
    const XLA_FFI_Buffer* g;
    float *m, *vr, *vc, *rr, *rc;
    int normalize_rows;
};

/* Runs `passes` (2: CAME, 1: pass A alone) over the n leaves of `in` with the step scalars `s` (enum CameScalar);
 * with `sum_sq` (float32[n]), each leaf's sum of squares of the update before clipping there. */
static XLA_FFI_Error* run_leaves(XLA_FFI_CallFrame* frame, const char* oom, const float* s, int passes,
                                 const LeafIn* in, int64_t n, float* sum_sq) {
    int threads = pool_threads(frame);
    if (threads > MAX_PARTS) threads = MAX_PARTS;
    int64_t count = 0, scratch = 0;
    for (int64_t i = 0; i < n; ++i) {
        int64_t B, R, C;
        matrices_of(in[i].g, &B, &R, &C);
        const int parts = parts_per_matrix(B, R, C, threads);
        count += B;
        scratch += B * (C * (int64_t)sizeof(float) + parts * 3 * C * (int64_t)(sizeof(double) + sizeof(float)) +
                        parts * (int64_t)sizeof(double) + 64);
    }
    /* one allocation: the Came, the matrices, the leaves, their order, then each matrix's scratch (64-byte
     * aligned) */
    const size_t top = (sizeof(Came) + 63) & ~(size_t)63;
    const size_t tables = (size_t)count * sizeof(Matrix) + (size_t)n * (sizeof(Leaf) + sizeof(int64_t));
    const size_t head = top + ((tables + 63) & ~(size_t)63), size = head + (((size_t)scratch + 63) & ~(size_t)63);
    char* block = (char*)aligned_alloc(64, size);
    if (block == NULL) return make_error(frame, oom);
    memset(block, 0, size);
    Came* a = (Came*)block;
    memcpy(a->s, s, sizeof(a->s));
    a->passes = passes;
    a->mats = (Matrix*)(block + top);
    a->leaves = (Leaf*)(block + top + (size_t)count * sizeof(Matrix));
    a->order = (int64_t*)(block + top + (size_t)count * sizeof(Matrix) + (size_t)n * sizeof(Leaf));
    a->pass_a = pass_a_for_cpu();
    a->pass_b = pass_b_for_cpu();
    char* cursor = block + head;
    int64_t at = 0, whole = 0;
    for (int64_t i = 0; i < n; ++i) {
        const LeafIn* x = &in[i];
        int64_t B, R, C;
        matrices_of(x->g, &B, &R, &C);
        const int64_t size = B * R * C;
        const int parts = parts_per_matrix(B, R, C, threads);
        const int split = split_leaf(B, R, C, threads);
        a->leaves[i] = (Leaf){at, size == 0 ? 0 : B, split, parts};
        for (int64_t b = 0; b < B; ++b, ++at) {
            Matrix* M = &a->mats[at];
            M->g = (const float*)x->g->data + b * R * C;
            M->m = x->m ? x->m + b * R * C : NULL;
            M->vr = x->vr + b * R, M->vc = x->vc + b * C;
            M->rr = x->rr ? x->rr + b * R : NULL, M->rc = x->rc ? x->rc + b * C : NULL;
            M->R = R, M->C = C, M->parts = parts, M->normalize_rows = x->normalize_rows;
            M->cf = (float*)cursor, cursor += C * sizeof(float);
            cursor = (char*)(((uintptr_t)cursor + 63) & ~(uintptr_t)63);
            M->acc = (double*)cursor, cursor += parts * 3 * C * sizeof(double);
            M->sums = (double*)cursor, cursor += parts * sizeof(double);
            M->blk = (float*)cursor, cursor += parts * 3 * C * sizeof(float);
        }
        if (size > 0 && !split) a->order[whole++] = i;
    }
    /* the leaves taken whole, largest first, so the last ones claimed are the small ones (insertion sort) */
    for (int64_t x = 1; x < whole; ++x) {
        const int64_t v = a->order[x], size = leaf_size(a, v);
        int64_t y = x;
        for (; y > 0 && leaf_size(a, a->order[y - 1]) < size; --y) a->order[y] = a->order[y - 1];
        a->order[y] = v;
    }
    int failed = whole > 0 && run_parts(frame, whole, threads, &a, sizeof(a), whole_run) != 0;
    for (int64_t i = 0; i < n && !failed; ++i) {
        const Leaf* L = &a->leaves[i];
        if (L->B == 0 || !L->split) continue;
        Matrix* first = &a->mats[L->first];
        for (int pass = 0; pass < passes && !failed; ++pass) {
            const Split t = {a, first, L->parts, pass};
            failed = run_parts(frame, L->B * L->parts, threads, &t, sizeof(t), split_run) != 0;
            for (int64_t b = 0; b < L->B && !failed; ++b) {
                if (pass == 0) after_a(a->s, &first[b]);
                else after_b(a->s, &first[b]);
            }
            if (pass == 0 && passes > 1) clip_leaf(a->s, first, L->B);
        }
    }
    for (int64_t i = 0; i < n && sum_sq != NULL && !failed; ++i) {
        const Leaf* L = &a->leaves[i];
        double total = 0.0;
        for (int64_t b = 0; b < L->B; ++b) total += a->mats[L->first + b].sum_sq;
        sum_sq[i] = (float)total;
    }
    free(block);
    return failed ? make_error(frame, oom) : NULL;
}

/* Whether the n operands from `first` on are buffers. */
static int buffers(const XLA_FFI_CallFrame* frame, int64_t first, int64_t n) {
    for (int64_t i = first; i < first + n; ++i)
        if (!is_buffer(frame, i)) return 0;
    return 1;
}

XLA_FFI_Error* gradax_came_matrices(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs < 1 || (nargs - 1) % 6 != 0 || frame->rets.size != 5 * ((nargs - 1) / 6))
        return make_error(frame, "gradax_came_matrices: expected 1 + 6n operands and 5n results");
    const int64_t n = (nargs - 1) / 6;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!buffers(frame, 0, nargs)) return make_error(frame, "gradax_came_matrices: operands must be buffers");
    const XLA_FFI_Buffer* sb = args[0];
    if (sb->dtype != XLA_FFI_DataType_F32 || num_elements(sb) != NCM)
        return make_error(frame, "gradax_came_matrices: expected float32[NCM] scalars");
    LeafIn* in = (LeafIn*)calloc((size_t)(n > 0 ? n : 1), sizeof(LeafIn));
    if (in == NULL) return make_error(frame, "gradax_came_matrices: out of memory");
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* g = args[1 + i];
        int64_t B, R, C;
        const int64_t r = g->rank;
        if (!matrices_of(g, &B, &R, &C) || !shaped(g, r, g->dims, C) || !shaped(args[1 + n + i], r, g->dims, C) ||
            !shaped(args[1 + 2 * n + i], r - 1, g->dims, R) || !shaped(args[1 + 3 * n + i], r - 1, g->dims, C) ||
            !shaped(args[1 + 4 * n + i], r - 1, g->dims, R) || !shaped(args[1 + 5 * n + i], r - 1, g->dims, C)) {
            free(in);
            return make_error(frame, "gradax_came_matrices: expected float32 g and m [..., R, C], row statistics "
                                     "[..., R] and column statistics [..., C]");
        }
        in[i].g = g;
        in[i].m = in_place(data_of(args[1 + n + i]), data_of(rets[i]), B * R * C, sizeof(float));
        in[i].vr = in_place(data_of(args[1 + 2 * n + i]), data_of(rets[n + i]), B * R, sizeof(float));
        in[i].vc = in_place(data_of(args[1 + 3 * n + i]), data_of(rets[2 * n + i]), B * C, sizeof(float));
        in[i].rr = in_place(data_of(args[1 + 4 * n + i]), data_of(rets[3 * n + i]), B * R, sizeof(float));
        in[i].rc = in_place(data_of(args[1 + 5 * n + i]), data_of(rets[4 * n + i]), B * C, sizeof(float));
        in[i].normalize_rows = 1;
    }
    XLA_FFI_Error* err = run_leaves(frame, "gradax_came_matrices: out of memory", data_of(args[0]), 2, in, n, NULL);
    free(in);
    return err;
}

/* Adafactor's factored second moment (gradax.adafactor's scale_by_factored_rms): pass A alone.
 *   args[0]      float32[NFM] step scalars (enum FactoredScalar, fused_scalars.h)
 *   args[1]      float32[n]: 1 where leaf i's normalized statistic (divided by its mean) is the row one, [..., R]
 *   args[2+i]    g [..., R, C],  args[2+n+i] row statistic [..., R],  args[2+2n+i] column statistic [..., C]
 *   rets[i]      the new row statistic, rets[n+i] the new column statistic (aliased: in place);
 *   rets[2n]     float32[n]: each leaf's sum of squares of g / sqrt(r' c' / mean(the normalized one)), for the
 *                clipping. */
XLA_FFI_Error* gradax_factored_moments(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    int64_t nargs = frame->args.size;
    if (nargs < 2 || (nargs - 2) % 3 != 0 || frame->rets.size != 2 * ((nargs - 2) / 3) + 1)
        return make_error(frame, "gradax_factored_moments: expected 2 + 3n operands and 2n + 1 results");
    const int64_t n = (nargs - 2) / 3;
    void** args = frame->args.args;
    void** rets = frame->rets.rets;
    if (!buffers(frame, 0, nargs)) return make_error(frame, "gradax_factored_moments: operands must be buffers");
    const XLA_FFI_Buffer *sb = args[0], *flags = args[1], *out = rets[2 * n];
    if (sb->dtype != XLA_FFI_DataType_F32 || num_elements(sb) != NFM || flags->dtype != XLA_FFI_DataType_F32 ||
        num_elements(flags) != n || out->dtype != XLA_FFI_DataType_F32 || num_elements(out) != n)
        return make_error(frame, "gradax_factored_moments: expected float32[NFM] scalars, float32[n] flags and "
                                 "a float32[n] result");
    float s[NCM] = {0};
    const float* f = data_of(args[0]);
    s[CM_B2] = f[FM_DECAY], s[CM_ONE_MINUS_B2] = f[FM_ONE_MINUS_DECAY], s[CM_EPS1] = f[FM_EPS];
    LeafIn* in = (LeafIn*)calloc((size_t)(n > 0 ? n : 1), sizeof(LeafIn));
    if (in == NULL) return make_error(frame, "gradax_factored_moments: out of memory");
    for (int64_t i = 0; i < n; ++i) {
        const XLA_FFI_Buffer* g = args[2 + i];
        int64_t B, R, C;
        const int64_t r = g->rank;
        if (!matrices_of(g, &B, &R, &C) || !shaped(g, r, g->dims, C) ||
            !shaped(args[2 + n + i], r - 1, g->dims, R) || !shaped(args[2 + 2 * n + i], r - 1, g->dims, C)) {
            free(in);
            return make_error(frame, "gradax_factored_moments: expected float32 g [..., R, C], row statistics "
                                     "[..., R] and column statistics [..., C]");
        }
        in[i].g = g;
        in[i].vr = in_place(data_of(args[2 + n + i]), data_of(rets[i]), B * R, sizeof(float));
        in[i].vc = in_place(data_of(args[2 + 2 * n + i]), data_of(rets[n + i]), B * C, sizeof(float));
        in[i].normalize_rows = data_of(args[1])[i] != 0.0f;
    }
    XLA_FFI_Error* err =
        run_leaves(frame, "gradax_factored_moments: out of memory", s, 1, in, n, data_of(rets[2 * n]));
    free(in);
    return err;
}
