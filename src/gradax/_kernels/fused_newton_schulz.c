/* gradax_newton_schulz: Muon's quintic Newton-Schulz iteration with bfloat16 matrix products, one matrix at a time
 * in the cache, on Intel AMX (the tile instructions of Sapphire Rapids and later) or with AVX-512 BF16's dot
 * products (VDPBF16PS: AMD Zen 4 and later, Intel Cooper Lake and later).
 *
 * Each step of the iteration, for X of m x n (m <= n is the cheap orientation; the caller says whether to iterate
 * on the transpose of the stored matrix):
 *     A = X X^T,   B = c1 A + c2 A A,   X <- c0 X + B X
 * The three products take their operands rounded to bfloat16 (round to nearest even) and accumulate in float32;
 * X, A and B stay float32 between them. These are the numbers of gradax.contrib's XLA iteration with
 * ns_dtype=bfloat16 (_low_precision_newton_schulz), up to the order of the float32 sums.
 *
 * Operands: args[0] x float32[..., r, c] (a batch of matrices), args[1] coefficients float32[..., S, 3] (one row
 * per step; the leading size is 1 or the batch's), args[2] int32[..., 2] flags: [0] iterate on x^T (a tall
 * matrix), [1] the products: 1 AMX tiles, 2 AVX-512 BF16, 0 portable (the same packing and order of work in plain
 * C, for tests on any CPU). Result: float32[..., r, c], the iterate after S steps.
 *
 * The products work on a copy of X padded with zeros to multiples of 32 in both dimensions (zero rows and columns
 * stay zero through every step). The tile shapes: C blocks of 32 x 32 floats (4 tiles), P rows of 32 bfloat16,
 * and Q in the "VNNI" layout the tile product reads, pairs of consecutive K rows interleaved: Q[n/16][K/2][16][2].
 */
#define _GNU_SOURCE /* syscall() for the AMX permission */
#include "fused_common.h"
#include "thread_space.h"

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    ((!defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 12))
#define GRADAX_AMX 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#else
#define GRADAX_AMX 0
#endif

static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Whether this process may use the two kinds of bfloat16 products. AVX-512 BF16: the CPU has it and the AVX-512 the
 * packings use (F, BW, VL), and the OS saves the AVX-512 state (XCR0). AMX: all that, and the CPU has AMX-TILE and
 * AMX-BF16, the OS saves the tile state, and Linux granted this process the tile data (arch_prctl
 * ARCH_REQ_XCOMP_PERM). Each asked once. */

#if GRADAX_AMX
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static uint32_t os_saved_states(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return lo;
}

static int avx512_bf16_check(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    unsigned avx512 = (1u << 16) | (1u << 30) | (1u << 31); /* AVX512F, AVX512BW, AVX512VL */
    if ((b & avx512) != avx512) return 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !(a & (1u << 5))) return 0; /* AVX512_BF16 */
    uint32_t states = (3u << 1) | (7u << 5);                                     /* SSE, AVX; opmask, ZMM */
    return (os_saved_states() & states) == states;
}

static int amx_check(void) {
    unsigned a, b, c, d;
    if (!avx512_bf16_check() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return 0; /* AMX-TILE, AMX-BF16 */
    uint32_t states = 3u << 17;                            /* tile config, tile data */
    if ((os_saved_states() & states) != states) return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* check(), asked once: `known` 0 (not asked yet), 1 (yes) or -1 (no) */
static int asked_once(atomic_int* known, int (*check)(void)) {
    int k = atomic_load_explicit(known, memory_order_acquire);
    if (k == 0) {
        k = check() ? 1 : -1;
        atomic_store_explicit(known, k, memory_order_release);
    }
    return k == 1;
}
#endif

int gradax_amx_available(void) {
#if GRADAX_AMX
    static atomic_int known = 0;
    return asked_once(&known, amx_check);
#else
    return 0;
#endif
}

int gradax_avx512_bf16_available(void) {
#if GRADAX_AMX
    static atomic_int known = 0;
    return asked_once(&known, avx512_bf16_check);
#else
    return 0;
#endif
}

/* ---------------------------------------------------------------------------------------------------------- */
/* One 32 x 32 block of P Q over K rows [k0, k1): rows i0.. of P (bfloat16, row stride ldp) times columns j0.. of Q
 * (VNNI, K rows in all), added to the block at C (row stride ldc) when `add`, else written there. k0 and k1 are
 * multiples of 32. */

#if GRADAX_AMX
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed, aligned(64))) TileConfig;

/* every tile 16 rows of 64 bytes: C 16 x 16 floats, P 16 x 32 bfloat16, Q 16 pairs x 16 columns */
static const TileConfig TILES = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0}, {16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0}};

AMX_TARGET static void load_tiles(void) { _tile_loadconfig(&TILES); }

AMX_TARGET static void release_tiles(void) { _tile_release(); }

AMX_TARGET static void block_amx(const uint16_t* P, int64_t ldp, const uint16_t* Q, int64_t K, int64_t k0,
                                 int64_t k1, int64_t i0, int64_t j0, float* C, int64_t ldc, int add) {
    const uint16_t* p0 = P + i0 * ldp;
    const uint16_t* p1 = p0 + 16 * ldp;
    const uint16_t* q0 = Q + (j0 / 16) * (K / 2) * 32;
    const uint16_t* q1 = q0 + (K / 2) * 32;
    float* c0 = C;
    float* c1 = C + 16 * ldc;
    if (add) {
        _tile_loadd(0, c0, ldc * 4);
        _tile_loadd(1, c0 + 16, ldc * 4);
        _tile_loadd(2, c1, ldc * 4);
        _tile_loadd(3, c1 + 16, ldc * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t k = k0; k < k1; k += 32) {
        _tile_loadd(4, p0 + k, ldp * 2);
        _tile_loadd(5, p1 + k, ldp * 2);
        _tile_loadd(6, q0 + k * 16, 64);
        _tile_loadd(7, q1 + k * 16, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c0, ldc * 4);
    _tile_stored(1, c0 + 16, ldc * 4);
    _tile_stored(2, c1, ldc * 4);
    _tile_stored(3, c1 + 16, ldc * 4);
}

/* The same block with AVX-512 BF16: 8 rows of C at a time in 16 registers (two of 16 columns each); for each pair
 * of K rows, one load per 16 columns of Q (its VNNI layout is what VDPBF16PS reads) and the row's pair of P
 * broadcast, each register adding P[i][2p] Q[2p][j] + P[i][2p+1] Q[2p+1][j]. */
BF16_TARGET static void block_bf16(const uint16_t* P, int64_t ldp, const uint16_t* Q, int64_t K, int64_t k0,
                                   int64_t k1, int64_t i0, int64_t j0, float* C, int64_t ldc, int add) {
    const uint16_t* q0 = Q + (j0 / 16) * (K / 2) * 32;
    const uint16_t* q1 = q0 + (K / 2) * 32;
    for (int64_t g = 0; g < 32; g += 8) {
        __m512 c[8][2];
        for (int i = 0; i < 8; ++i) {
            float* row = C + (g + i) * ldc;
            c[i][0] = add ? _mm512_loadu_ps(row) : _mm512_setzero_ps();
            c[i][1] = add ? _mm512_loadu_ps(row + 16) : _mm512_setzero_ps();
        }
        const uint16_t* p = P + (i0 + g) * ldp;
        for (int64_t k = k0 / 2; k < k1 / 2; ++k) {
            __m512bh b0 = (__m512bh)_mm512_loadu_si512(q0 + k * 32);
            __m512bh b1 = (__m512bh)_mm512_loadu_si512(q1 + k * 32);
            for (int i = 0; i < 8; ++i) {
                int32_t pair;
                memcpy(&pair, p + i * ldp + 2 * k, 4);
                __m512bh a = (__m512bh)_mm512_set1_epi32(pair);
                c[i][0] = _mm512_dpbf16_ps(c[i][0], a, b0);
                c[i][1] = _mm512_dpbf16_ps(c[i][1], a, b1);
            }
        }
        for (int i = 0; i < 8; ++i) {
            float* row = C + (g + i) * ldc;
            _mm512_storeu_ps(row, c[i][0]);
            _mm512_storeu_ps(row + 16, c[i][1]);
        }
    }
}
#endif

/* The same block in plain C: each element adds the pairs P[i][2p] Q[2p][j] + P[i][2p+1] Q[2p+1][j] in order of p,
 * as the tile product does. */
static void block_portable(const uint16_t* P, int64_t ldp, const uint16_t* Q, int64_t K, int64_t k0, int64_t k1,
                           int64_t i0, int64_t j0, float* C, int64_t ldc, int add) {
    for (int64_t i = 0; i < 32; ++i) {
        float* c = C + i * ldc;
        float acc[32];
        for (int64_t j = 0; j < 32; ++j) acc[j] = add ? c[j] : 0.0f;
        const uint16_t* row = P + (i0 + i) * ldp;
        for (int64_t p = k0 / 2; p < k1 / 2; ++p) {
            float a0 = from_bf16(row[2 * p]), a1 = from_bf16(row[2 * p + 1]);
            for (int64_t j = 0; j < 32; ++j) {
                const uint16_t* q = Q + (((j0 + j) / 16) * (K / 2) + p) * 32 + ((j0 + j) % 16) * 2;
                acc[j] += a0 * from_bf16(q[0]) + a1 * from_bf16(q[1]);
            }
        }
        memcpy(c, acc, sizeof(acc));
    }
}

typedef void (*BlockFn)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                        float*, int64_t, int);

/* ---------------------------------------------------------------------------------------------------------- */
/* Conversions and packings, in plain C and with AVX-512. Each Q packing is the VNNI layout of a row-major bfloat16
 * matrix M (rows x cols, both multiples of 32) as the Q of a product: Q = M (K = rows), or Q = M^T (K = cols).
 * Lengths are multiples of 32. */

static inline uint16_t round_one(float f) { /* to bfloat16, to nearest even; a NaN stays a (quiet) NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40) : (uint16_t)rounded;
}

static void round_portable(const float* in, uint16_t* out, int64_t n) {
    for (int64_t e = 0; e < n; ++e) out[e] = round_one(in[e]);
}

/* Q = M, the row pairs [p0, p1) of M */
static void vnni_portable(const uint16_t* M, int64_t rows, int64_t cols, uint16_t* Q, int64_t p0, int64_t p1) {
    for (int64_t nb = 0; nb < cols / 16; ++nb)
        for (int64_t p = p0; p < p1; ++p) {
            const uint16_t* r0 = M + 2 * p * cols + nb * 16;
            const uint16_t* r1 = r0 + cols;
            uint16_t* q = Q + (nb * (rows / 2) + p) * 32;
            for (int64_t j = 0; j < 16; ++j) {
                q[2 * j] = r0[j];
                q[2 * j + 1] = r1[j];
            }
        }
}

/* Q = M^T: Q[nb][p][j] (as 32-bit pairs) = M[nb*16 + j][2p, 2p+1], a transpose of M's 32-bit pairs; the strips
 * of 16 rows [nb0, nb1) of M. */
static void vnni_t_portable(const uint16_t* M, int64_t rows, int64_t cols, uint16_t* Q, int64_t nb0, int64_t nb1) {
    (void)rows;
    const uint32_t* m = (const uint32_t*)M;
    uint32_t* q = (uint32_t*)Q;
    int64_t pairs = cols / 2;
    for (int64_t nb = nb0; nb < nb1; ++nb)
        for (int64_t p = 0; p < pairs; ++p)
            for (int64_t j = 0; j < 16; ++j) q[(nb * pairs + p) * 16 + j] = m[(nb * 16 + j) * pairs + p];
}

/* dst[j][i] = src[i][j] for rows x cols of src (row strides lds, ldd) */
static void transpose_portable(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst, int64_t ldd) {
    for (int64_t i0 = 0; i0 < rows; i0 += 16)
        for (int64_t j0 = 0; j0 < cols; j0 += 16)
            for (int64_t i = i0; i < i0 + 16 && i < rows; ++i)
                for (int64_t j = j0; j < j0 + 16 && j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

/* B = c1 A + c2 AA (into aa), rounded into bb */
static void combine_portable(const float* a, float* aa, uint16_t* bb, float c1, float c2, int64_t n) {
    for (int64_t e = 0; e < n; ++e) {
        float t1 = c1 * a[e], t2 = c2 * aa[e];
        aa[e] = t1 + t2;
        bb[e] = round_one(aa[e]);
    }
}

/* 32 elements of X <- c0 X + (B X), and X's bfloat16 copy */
static void update_portable(float* x, const float* bx, uint16_t* xb, float c0) {
    for (int64_t j = 0; j < 32; ++j) {
        float t0 = c0 * x[j];
        x[j] = t0 + bx[j];
        xb[j] = round_one(x[j]);
    }
}

#if GRADAX_AMX
/* The packings, roundings and element-wise parts with AVX-512 (F, BW, VL, BF16), shared by the AMX and the AVX-512
 * BF16 products. VCVTNE2PS2BF16 rounds to nearest even and keeps NaNs; it reads denormal inputs as zero (both
 * products do too). */
BF16_TARGET static inline __m512i round32(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

BF16_TARGET static void round_avx512(const float* in, uint16_t* out, int64_t n) {
    for (int64_t e = 0; e < n; e += 32)
        _mm512_storeu_si512(out + e, round32(_mm512_loadu_ps(in + e), _mm512_loadu_ps(in + e + 16)));
}

BF16_TARGET static void vnni_avx512(const uint16_t* M, int64_t rows, int64_t cols, uint16_t* Q, int64_t p0,
                                int64_t p1) {
    for (int64_t nb = 0; nb < cols / 16; ++nb)
        for (int64_t p = p0; p < p1; ++p) {
            const uint16_t* r0 = M + 2 * p * cols + nb * 16;
            __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)r0));
            __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(r0 + cols)));
            _mm512_storeu_si512(Q + (nb * (rows / 2) + p) * 32, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
}

/* the 16 x 16 transpose of 32-bit elements, in registers */
BF16_TARGET static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; ++g) { /* u[4g + c], lane L: column 4L + c of rows 4g..4g+3 */
        u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int c = 0; c < 4; ++c) {
        t[c] = _mm512_shuffle_i32x4(u[c], u[c + 4], 0x88);
        t[c + 4] = _mm512_shuffle_i32x4(u[c], u[c + 4], 0xdd);
        t[c + 8] = _mm512_shuffle_i32x4(u[c + 8], u[c + 12], 0x88);
        t[c + 12] = _mm512_shuffle_i32x4(u[c + 8], u[c + 12], 0xdd);
    }
    for (int c = 0; c < 4; ++c) {
        r[c] = _mm512_shuffle_i32x4(t[c], t[c + 8], 0x88);
        r[c + 8] = _mm512_shuffle_i32x4(t[c], t[c + 8], 0xdd);
        r[c + 4] = _mm512_shuffle_i32x4(t[c + 4], t[c + 12], 0x88);
        r[c + 12] = _mm512_shuffle_i32x4(t[c + 4], t[c + 12], 0xdd);
    }
}

BF16_TARGET static void transpose_avx512(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                                     int64_t ldd) {
    __m512i r[16];
    int64_t full_rows = rows & ~(int64_t)15, full_cols = cols & ~(int64_t)15;
    for (int64_t i0 = 0; i0 < full_rows; i0 += 16)
        for (int64_t j0 = 0; j0 < full_cols; j0 += 16) {
            for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + (i0 + i) * lds + j0);
            transpose16(r);
            for (int j = 0; j < 16; ++j) _mm512_storeu_si512(dst + (j0 + j) * ldd + i0, r[j]);
        }
    if (full_cols < cols) transpose_portable(src + full_cols, rows, cols - full_cols, lds, dst + full_cols * ldd, ldd);
    if (full_rows < rows)
        transpose_portable(src + full_rows * lds, rows - full_rows, full_cols, lds, dst + full_rows, ldd);
}

BF16_TARGET static void vnni_t_avx512(const uint16_t* M, int64_t rows, int64_t cols, uint16_t* Q, int64_t nb0,
                                  int64_t nb1) {
    (void)rows;
    const uint32_t* m = (const uint32_t*)M;
    uint32_t* q = (uint32_t*)Q;
    int64_t pairs = cols / 2;
    __m512i r[16];
    for (int64_t nb = nb0; nb < nb1; ++nb)
        for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
            for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(m + (nb * 16 + j) * pairs + p0);
            transpose16(r);
            for (int p = 0; p < 16; ++p) _mm512_storeu_si512(q + (nb * pairs + p0 + p) * 16, r[p]);
        }
}

BF16_TARGET static void combine_avx512(const float* a, float* aa, uint16_t* bb, float c1, float c2, int64_t n) {
    __m512 v1 = _mm512_set1_ps(c1), v2 = _mm512_set1_ps(c2);
    for (int64_t e = 0; e < n; e += 32) {
        __m512 lo = _mm512_add_ps(_mm512_mul_ps(v1, _mm512_loadu_ps(a + e)), _mm512_mul_ps(v2, _mm512_loadu_ps(aa + e)));
        __m512 hi = _mm512_add_ps(_mm512_mul_ps(v1, _mm512_loadu_ps(a + e + 16)),
                                  _mm512_mul_ps(v2, _mm512_loadu_ps(aa + e + 16)));
        _mm512_storeu_ps(aa + e, lo);
        _mm512_storeu_ps(aa + e + 16, hi);
        _mm512_storeu_si512(bb + e, round32(lo, hi));
    }
}

BF16_TARGET static void update_avx512(float* x, const float* bx, uint16_t* xb, float c0) {
    __m512 v0 = _mm512_set1_ps(c0);
    __m512 lo = _mm512_add_ps(_mm512_mul_ps(v0, _mm512_loadu_ps(x)), _mm512_loadu_ps(bx));
    __m512 hi = _mm512_add_ps(_mm512_mul_ps(v0, _mm512_loadu_ps(x + 16)), _mm512_loadu_ps(bx + 16));
    _mm512_storeu_ps(x, lo);
    _mm512_storeu_ps(x + 16, hi);
    _mm512_storeu_si512(xb, round32(lo, hi));
}
#endif

enum { PORTABLE_PRODUCTS = 0, AMX_PRODUCTS = 1, AVX512_BF16_PRODUCTS = 2 }; /* flags[1] */

typedef struct {
    BlockFn block;
    void (*round)(const float*, uint16_t*, int64_t);
    void (*vnni)(const uint16_t*, int64_t, int64_t, uint16_t*, int64_t, int64_t);
    void (*vnni_t)(const uint16_t*, int64_t, int64_t, uint16_t*, int64_t, int64_t);
    void (*combine)(const float*, float*, uint16_t*, float, float, int64_t);
    void (*update)(float*, const float*, uint16_t*, float);
    void (*transpose)(const float*, int64_t, int64_t, int64_t, float*, int64_t);
} Ops;

static const Ops PORTABLE = {block_portable, round_portable, vnni_portable, vnni_t_portable, combine_portable,
                             update_portable, transpose_portable};
#if GRADAX_AMX
static const Ops AMX = {block_amx,         round_avx512,  vnni_avx512,     vnni_t_avx512,
                        combine_avx512, update_avx512, transpose_avx512};
static const Ops AVX512_BF16 = {block_bf16,          round_avx512,  vnni_avx512,     vnni_t_avx512,
                                combine_avx512, update_avx512, transpose_avx512};
#endif

/* K rows at a time in the products with long K (X X^T of a wide X): the part of Q they read stays in the cache
 * while the blocks of rows pass over it. */
#define K_CHUNK 1024

/* The block rows in the order 0, last, 1, last - 1, ...: consecutive ranges of it hold about as many blocks. */
static inline int64_t block_row(int64_t s, int64_t rows) { return s % 2 == 0 ? s / 2 : rows - 1 - s / 2; }

/* The blocks on and above the diagonal of S = P P^T (n x n, row stride n; P n x K bfloat16, Q its VNNI transpose)
 * in the block rows [s0, s1) of the balanced order (block_row). */
static void symmetric_rows(const uint16_t* P, const uint16_t* Q, int64_t n, int64_t K, float* S, const Ops* ops,
                           int64_t s0, int64_t s1) {
    for (int64_t k0 = 0; k0 < K; k0 += K_CHUNK) {
        int64_t k1 = k0 + K_CHUNK < K ? k0 + K_CHUNK : K;
        for (int64_t s = s0; s < s1; ++s) {
            int64_t i0 = 32 * block_row(s, n / 32);
            for (int64_t j0 = i0; j0 < n; j0 += 32) ops->block(P, K, Q, K, k0, k1, i0, j0, S + i0 * n + j0, n, k0 > 0);
        }
    }
}

/* The blocks below the diagonal of a symmetric S from those above (S is then exactly symmetric). */
static void mirror(float* S, int64_t n, const Ops* ops) {
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = (i & ~(int64_t)31); j < i; ++j) S[i * n + j] = S[j * n + i]; /* the diagonal blocks */
    for (int64_t i0 = 32; i0 < n; i0 += 32)
        for (int64_t j0 = 0; j0 < i0; j0 += 32) ops->transpose(S + j0 * n + i0, 32, 32, n, S + i0 * n + j0, n);
}

/* ---------------------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t mp, np;                        /* padded sizes */
    float *x, *a, *aa;                     /* X (mp x np), A and A A (mp x mp) */
    uint16_t *xb, *xt, *xv, *ab, *av, *bb; /* bfloat16: X, X^T and X as Q, A, A as Q, B */
} Work;

static int work_init(Work* w, int64_t mp, int64_t np) {
    memset(w, 0, sizeof(*w));
    w->mp = mp;
    w->np = np;
    size_t xn = (size_t)(mp * np), an = (size_t)(mp * mp);
    size_t sizes[9] = {xn * 4, an * 4, an * 4, xn * 2, xn * 2, xn * 2, an * 2, an * 2, an * 2};
    size_t total = 0;
    for (int k = 0; k < 9; ++k) total += up64(sizes[k]);
    char* base = (char*)thread_space(total);
    if (base == NULL) return 0;
    void** parts[9] = {(void**)&w->x, (void**)&w->a, (void**)&w->aa, (void**)&w->xb, (void**)&w->xt,
                       (void**)&w->xv, (void**)&w->ab, (void**)&w->av, (void**)&w->bb};
    for (int k = 0; k < 9; ++k) {
        *parts[k] = base;
        base += up64(sizes[k]);
    }
    return 1;
}

/* The parts of a step that can run on several threads at once, each over a range of strips. */
enum { PACK, GRAM, UPDATE };

static int64_t strips(const Work* w, int kind) { return kind == UPDATE ? w->np / 32 : w->mp / 32; }

static void phase(Work* w, const Ops* ops, int kind, float c0, int64_t s0, int64_t s1) {
    int64_t mp = w->mp, np = w->np;
    if (kind == PACK) { /* X's two VNNI copies, 32 rows of X at a time */
        ops->vnni_t(w->xb, mp, np, w->xt, 2 * s0, 2 * s1);
        ops->vnni(w->xb, mp, np, w->xv, 16 * s0, 16 * s1);
    } else if (kind == GRAM) { /* A = X X^T, on and above the diagonal */
        symmetric_rows(w->xb, w->xt, mp, np, w->a, ops, s0, s1);
    } else { /* X <- c0 X + B X, 32 columns at a time; the product reads only xv (X's VNNI copy), so X and its
              * row-major copy xb are updated in place */
        float blk[32 * 32] __attribute__((aligned(64)));
        for (int64_t j0 = 32 * s0; j0 < 32 * s1; j0 += 32)
            for (int64_t i0 = 0; i0 < mp; i0 += 32) {
                ops->block(w->bb, mp, w->xv, mp, 0, mp, i0, j0, blk, 32, 0);
                for (int64_t i = 0; i < 32; ++i)
                    ops->update(w->x + (i0 + i) * np + j0, blk + i * 32, w->xb + (i0 + i) * np + j0, c0);
            }
    }
}

/* A phase split into `parts` (one per thread of XLA's pool that takes a part; the caller takes the rest). */
typedef struct {
    Work* w;
    const Ops* ops;
    int kind, tiles, parts; /* tiles: the products are AMX's (each thread loads its tile configuration) */
    float c0;
} Phase;

static void phase_part(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    (void)lo;
    (void)hi;
    Phase* ph = (Phase*)job->data;
    int64_t n = strips(ph->w, ph->kind);
#if GRADAX_AMX
    if (ph->tiles) load_tiles();
#endif
    phase(ph->w, ph->ops, ph->kind, ph->c0, n * leaf / ph->parts, n * (leaf + 1) / ph->parts);
#if GRADAX_AMX
    if (ph->tiles) release_tiles();
#endif
}

/* Runs a phase, on `threads` threads where there are that many (0: on this thread alone); returns 0, or -1 when
 * out of memory. */
static int run_phase(XLA_FFI_CallFrame* frame, Work* w, const Ops* ops, int tiles, int kind, float c0, int threads) {
    int64_t n = strips(w, kind);
    int parts = threads < n ? threads : (int)n;
    if (parts <= 1) {
        phase(w, ops, kind, c0, 0, n);
        return 0;
    }
    Job* job = new_job(parts, sizeof(Phase));
    if (job == NULL) return -1;
    *(Phase*)job->data = (Phase){w, ops, kind, tiles, parts, c0};
    for (int k = 0; k <= parts; ++k) job->offset[k] = 16 * k; /* a "leaf" of 16 elements per part */
    job->run = phase_part;
    job->parts = parts;
    job->workers = parts;
    run_job(frame, job);
    release(job);
#if GRADAX_AMX
    if (tiles) load_tiles(); /* the caller ran a part, which released its tiles */
#endif
    return 0;
}

/* One matrix: in (r x c, row-major) -> out, iterating on in^T when transposed; the products and packings of each
 * step on `threads` threads of XLA's pool (0: all on this thread). Returns 0, or -1 when out of memory. */
static int newton_schulz(XLA_FFI_CallFrame* frame, Work* w, const float* in, float* out, int64_t r, int64_t c,
                         int transposed, const float* coeffs, int64_t steps, const Ops* ops, int tiles, int threads) {
    int64_t m = transposed ? c : r, n = transposed ? r : c, mp = w->mp, np = w->np;
    float* x = w->x;
    if (transposed) {
        memset(x, 0, (size_t)(mp * np) * 4);
        ops->transpose(in, r, c, c, x, np);
    } else {
        for (int64_t i = 0; i < m; ++i) {
            memcpy(x + i * np, in + i * c, (size_t)n * 4);
            memset(x + i * np + n, 0, (size_t)(np - n) * 4);
        }
        memset(x + m * np, 0, (size_t)((mp - m) * np) * 4);
    }
    ops->round(x, w->xb, mp * np);
    for (int64_t s = 0; s < steps; ++s) {
        const float c0 = coeffs[3 * s], c1 = coeffs[3 * s + 1], c2 = coeffs[3 * s + 2];
        if (run_phase(frame, w, ops, tiles, PACK, c0, threads)) return -1;
        if (run_phase(frame, w, ops, tiles, GRAM, c0, threads)) return -1; /* A = X X^T */
        mirror(w->a, mp, ops);
        ops->round(w->a, w->ab, mp * mp);
        ops->vnni(w->ab, mp, mp, w->av, 0, mp / 2);
        symmetric_rows(w->ab, w->av, mp, mp, w->aa, ops, 0, mp / 32); /* A A (A symmetric: its VNNI is A^T's) */
        mirror(w->aa, mp, ops);
        ops->combine(w->a, w->aa, w->bb, c1, c2, mp * mp); /* B = c1 A + c2 A A */
        if (run_phase(frame, w, ops, tiles, UPDATE, c0, threads)) return -1;
    }
    if (transposed) {
        ops->transpose(x, c, r, np, out, c);
    } else {
        for (int64_t i = 0; i < m; ++i) memcpy(out + i * c, x + i * np, (size_t)n * 4);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------------------- */

/* From this many elements (padded) a matrix alone is split over the threads, step by step; smaller matrices go to
 * the threads whole, one per thread (and XLA runs other calls beside). */
#define SPLIT_FROM (1 << 20)

typedef struct {
    XLA_FFI_CallFrame* frame;
    const float *in, *coeffs;
    float* out;
    int64_t r, c, steps, coeff_stride, mp, np;
    int transposed, products; /* PORTABLE_PRODUCTS, AMX_PRODUCTS or AVX512_BF16_PRODUCTS */
    atomic_int failed; /* a part that could not allocate its work space */
} NewtonSchulz;

static const Ops* ops_for(int products) {
#if GRADAX_AMX
    if (products == AMX_PRODUCTS) return &AMX;
    if (products == AVX512_BF16_PRODUCTS) return &AVX512_BF16;
#endif
    (void)products;
    return &PORTABLE;
}

/* Matrices [b0, b1) on this thread, each step's work over `threads` threads of XLA's pool (0: all here), in this
 * thread's work space. Returns 0, or -1 when out of memory. */
static int run_matrices(NewtonSchulz* ns, int64_t b0, int64_t b1, int threads) {
    Work w;
    if (!work_init(&w, ns->mp, ns->np)) return -1;
    int tiles = ns->products == AMX_PRODUCTS;
#if GRADAX_AMX
    if (tiles) load_tiles();
#endif
    int64_t size = ns->r * ns->c;
    int failed = 0;
    for (int64_t b = b0; b < b1 && !failed; ++b)
        failed = newton_schulz(ns->frame, &w, ns->in + b * size, ns->out + b * size, ns->r, ns->c, ns->transposed,
                               ns->coeffs + b * ns->coeff_stride, ns->steps, ops_for(ns->products), tiles, threads);
#if GRADAX_AMX
    if (tiles) release_tiles();
#endif
    trim_space();
    return failed;
}

/* One matrix of the batch (run_per_matrix). */
static void newton_schulz_part(Job* job, int part, int64_t leaf, int64_t lo, int64_t hi) {
    (void)part;
    (void)lo;
    (void)hi;
    NewtonSchulz* ns = (NewtonSchulz*)job->data;
    if (run_matrices(ns, leaf, leaf + 1, 0)) atomic_store(&ns->failed, 1);
}

XLA_FFI_Error* gradax_newton_schulz(XLA_FFI_CallFrame* frame) {
    if (answer_metadata(frame)) return NULL;
    if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) return NULL;
    if (frame->args.size != 3 || frame->rets.size != 1)
        return make_error(frame, "gradax_newton_schulz: expected 3 operands and 1 result");
    for (int64_t i = 0; i < 3; ++i)
        if (!is_buffer(frame, i)) return make_error(frame, "gradax_newton_schulz: every operand must be a buffer");
    XLA_FFI_Buffer *x = frame->args.args[0], *cf = frame->args.args[1], *fl = frame->args.args[2];
    XLA_FFI_Buffer* out = frame->rets.rets[0];
    if (x->dtype != XLA_FFI_DataType_F32 || out->dtype != XLA_FFI_DataType_F32 || x->rank < 2 ||
        num_elements(out) != num_elements(x))
        return make_error(frame, "gradax_newton_schulz: expected float32 matrices [..., r, c] and a result alike");
    if (cf->dtype != XLA_FFI_DataType_F32 || cf->rank < 2 || cf->dims[cf->rank - 1] != 3)
        return make_error(frame, "gradax_newton_schulz: expected float32 coefficients [..., steps, 3]");
    if (fl->dtype != XLA_FFI_DataType_S32 || num_elements(fl) < 2)
        return make_error(frame, "gradax_newton_schulz: expected int32 flags [..., 2]");
    int64_t r = x->dims[x->rank - 2], c = x->dims[x->rank - 1];
    int64_t batch = r * c > 0 ? num_elements(x) / (r * c) : 0;
    int64_t steps = cf->dims[cf->rank - 2];
    int64_t coeff_batch = steps > 0 ? num_elements(cf) / (3 * steps) : 1;
    if (coeff_batch != 1 && coeff_batch != batch)
        return make_error(frame, "gradax_newton_schulz: one row of coefficients per step, or one set per matrix");
    const int32_t* flags = (const int32_t*)fl->data;
    int transposed = flags[0] != 0, products = flags[1];
    if (products != PORTABLE_PRODUCTS && products != AMX_PRODUCTS && products != AVX512_BF16_PRODUCTS)
        return make_error(frame, "gradax_newton_schulz: the products flag must be 0 (portable), 1 (AMX) or 2 "
                                 "(AVX-512 BF16)");
    if (products == AMX_PRODUCTS && !gradax_amx_available())
        return make_error(frame, "gradax_newton_schulz: this CPU or process cannot use AMX");
    if (products == AVX512_BF16_PRODUCTS && !gradax_avx512_bf16_available())
        return make_error(frame, "gradax_newton_schulz: this CPU cannot use AVX-512 BF16");
    if (batch == 0) return NULL;
    int64_t m = transposed ? c : r, n = transposed ? r : c;
    int64_t mp = (m + 31) & ~(int64_t)31, np = (n + 31) & ~(int64_t)31;
    int threads = pool_threads(frame);
    if (threads > MAX_PARTS) threads = MAX_PARTS;
    Job* job = new_job(batch, sizeof(NewtonSchulz));
    if (job == NULL) return make_error(frame, "gradax_newton_schulz: out of memory");
    NewtonSchulz* ns = (NewtonSchulz*)job->data;
    *ns = (NewtonSchulz){frame, (const float*)x->data, (const float*)cf->data, (float*)out->data, r, c, steps,
                         coeff_batch == 1 ? 0 : 3 * steps, mp, np, transposed, products};
    atomic_init(&ns->failed, 0);
    if (batch < threads && mp * np >= SPLIT_FROM) { /* a matrix at a time, each step over the threads */
        int failed = run_matrices(ns, 0, batch, threads);
        release(job);
        return failed ? make_error(frame, "gradax_newton_schulz: out of memory") : NULL;
    }
    run_per_matrix(frame, job, batch, newton_schulz_part);
    int failed = atomic_load(&ns->failed);
    release(job);
    return failed ? make_error(frame, "gradax_newton_schulz: out of memory") : NULL;
}
