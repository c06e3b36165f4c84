/* gemm.cu - cuBLASLt products for large M (prefill, big batches, lm_head).
 *
 * Layout (TN, what FP8 tensor cores take): W [N, K] row-major is a
 * column-major K x N matrix used transposed (A, opT); x [M, K] row-major is
 * column-major K x M (B, opN); y [M, N] row-major is column-major N x M (D).
 * So cuBLASLt's "M" is our N and its "N" is our M: the per-channel weight
 * scale is A's outer vector, the per-token activation scale B's.
 *
 * Three FP8 paths, chosen at create time by running each on a small random
 * problem against l8k_gemv (exact products, f32 sums) and keeping the first
 * that agrees: cuBLASLt's OUTER_VEC_32F scaling (CUDA 12.9+ on sm_90), FP8
 * at unit scale plus our scale epilogue, and the sm_80 path (codes decoded
 * exactly to bf16, bf16 GEMM, epilogue). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include "common.cuh"

#define BLAS_WORKSPACE (32u << 20)
/* Chosen algorithms, by shape: serving steps bring a new M nearly every
 * step, and a heuristic query costs far more than a lookup (open
 * addressing; emptied when three quarters full). */
#define BLAS_CACHE 4096u
#define BLAS_MAX_ALIGN 256u    /* cuBLASLt's default assumption for every pointer */
/* Candidates a product may be pinned to (l8k_gemm_fp8_pin), and pins kept. */
#define BLAS_MAX_ALGOS 8
#define BLAS_PINS 32
/* Scratch buffers outgrown while a captured graph points at them, kept until
 * destroy (a growth at least doubles, so 16 cover any size). */
#define BLAS_RETIRED 16
/* Probe acceptance, relative L2 error against l8k_gemv (exact products, f32
 * sums). Hopper's FP8 tensor cores add within an instruction at reduced
 * precision (about 14 bits before cuBLASLt promotes the partial sums), so an
 * FP8 path lands near 1e-5..1e-4; a misapplied scale or a transposed
 * operand is off by O(1). */
#define PROBE_TOL 1e-3
/* With a bf16 output, its rounding adds up to 2^-8 relative (twice on the
 * epilogue paths), still far from O(1). */
#define PROBE_TOL_BF16 1e-2

enum gemm_kind { GK_FP8_OUTER = 0, GK_FP8_UNIT = 1, GK_BF16 = 2 };

struct algo_entry {
    int kind;
    enum l8k_dtype out;
    uint32_t M, N, K;
    uint32_t align[3];   /* of A, B, C/D: an algo chosen for 256 may need 256 */
    cublasLtMatmulAlgo_t algo;
    bool valid;
    bool refused;   /* the heuristic offered nothing for this key */
};

/* A shape pinned to the heuristic's index-th algorithm instead of its
 * first (kept apart from the cache, which empties itself). */
struct algo_pin {
    int kind;
    enum l8k_dtype out;
    uint32_t M, N, K, align[3], index;
};

struct l8k_blas {
    cublasLtHandle_t h;
    void *ws;
    /* per output dtype, [0] f32 and [1] bf16: the path used, whether each
     * path passed its probe, and each path's relative error (-1: refused) */
    enum l8k_fp8_path path[2];
    bool path_ok[3][2];
    double probe_err[3][2];
    uint16_t *scr;       /* bf16 scratch for the decode path: W then x */
    size_t scr_elems;
    bool scr_captured;   /* a stream capture has recorded scr's address */
    void *retired[BLAS_RETIRED];
    uint32_t n_retired;
    struct algo_entry cache[BLAS_CACHE];
    uint32_t cache_used;
    struct algo_pin pins[BLAS_PINS];
    uint32_t n_pins;
    uint32_t n_refused;   /* keys the heuristic refused (l8k_blas_refused) */
};

/* y *= x_scale[m] * w_scale[n], in place, y f32 or bf16 (then rounded
 * twice: the unit-scale product, then the scaled value). */
template <typename Y>
static __global__ void scale_epilogue_kernel(Y *__restrict__ y, const float *__restrict__ xs,
                                             const float *__restrict__ ws, uint32_t M, uint32_t N)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)M * N)
        return;
    uint32_t m = (uint32_t)(i / N), n = (uint32_t)(i % N);
    l8k_store(&y[i], l8k_load(&y[i]) * (xs[m] * ws[n]));
}

static __global__ void fp8_to_bf16_kernel(const uint8_t *__restrict__ in, uint16_t *__restrict__ out,
                                          size_t n)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = l8k_float_to_bf16(l8k_fp8_to_float(in[i])); /* exact: 3 mantissa bits */
}

static int lt_status(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? 0 : -EIO;
}

/* The largest power of two up to 256 that divides the address. */
static uint32_t ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = BLAS_MAX_ALIGN;
    while (al > 1 && (a & (al - 1)))
        al >>= 1;
    return al;
}

/* The cache slot of this key: its entry, or the empty slot where it goes. */
static struct algo_entry *cache_slot(struct l8k_blas *b, int kind, enum l8k_dtype out,
                                     uint32_t M, uint32_t N, uint32_t K, const uint32_t al[3])
{
    uint64_t h = (uint64_t)(kind * 4 + out) * 0x9E3779B97F4A7C15ull;
    const uint32_t key[6] = { M, N, K, al[0], al[1], al[2] };
    for (int i = 0; i < 6; i++)
        h = (h ^ key[i]) * 0x100000001B3ull;
    for (uint32_t i = (uint32_t)(h >> 32) & (BLAS_CACHE - 1);; i = (i + 1) & (BLAS_CACHE - 1)) {
        struct algo_entry *e = &b->cache[i];
        if (!e->valid || (e->kind == kind && e->out == out && e->M == M && e->N == N && e->K == K &&
                          memcmp(e->align, al, sizeof e->align) == 0))
            return e;
    }
}

/* One product's cuBLASLt descriptors, y = op(A) op(B) (+ scales),
 * column-major as above; y f32 or bf16 (C and D alike). */
struct lt_desc {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    uint32_t al[3];   /* the alignment of A, B, C/D */
};

static void desc_free(struct lt_desc *d)
{
    if (d->lc)
        cublasLtMatrixLayoutDestroy(d->lc);
    if (d->lb)
        cublasLtMatrixLayoutDestroy(d->lb);
    if (d->la)
        cublasLtMatrixLayoutDestroy(d->la);
    if (d->op)
        cublasLtMatmulDescDestroy(d->op);
}

static int desc_make(struct lt_desc *d, int kind, const void *w, const void *x, const float *ws,
                     const float *xs, uint32_t M, uint32_t N, uint32_t K, enum l8k_dtype y_dt,
                     const void *y)
{
    cudaDataType_t in_t = kind == GK_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3,
                   out_t = y_dt == L8K_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    memset(d, 0, sizeof *d);
    if (cublasLtMatmulDescCreate(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS) {
        d->op = NULL;
        return -EIO;
    }
    if (cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb))
        goto err;
    if (kind == GK_FP8_OUTER) {
        int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        if (cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode) ||
            cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode) ||
            cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof ws) ||
            cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof xs))
            goto err;
    }
    if (cublasLtMatrixLayoutCreate(&d->la, in_t, K, N, K) ||
        cublasLtMatrixLayoutCreate(&d->lb, in_t, K, M, K) ||
        cublasLtMatrixLayoutCreate(&d->lc, out_t, N, M, N))
        goto err;
    /* The heuristic assumes 256-byte aligned operands unless told otherwise,
     * and its choice may fault or be refused on less: tell it the real
     * alignment, and key the cache on it. */
    d->al[0] = ptr_align(w);
    d->al[1] = ptr_align(x);
    d->al[2] = ptr_align(y);
    return 0;
err:
    desc_free(d);
    memset(d, 0, sizeof *d);
    return -EIO;
}

/* The heuristic's first n algorithms for d (found of them), best first;
 * -ENOTSUP when it has none for this shape (the library's refusal, which a
 * caller may answer with another path), -EIO on any other failure. */
static int heuristic(struct l8k_blas *b, const struct lt_desc *d, int n,
                     cublasLtMatmulHeuristicResult_t *res, int *found)
{
    cublasLtMatmulPreference_t pref = NULL;
    size_t wsb = BLAS_WORKSPACE;
    cublasStatus_t s;
    int rc = -EIO;
    *found = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &wsb, sizeof wsb) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &d->al[0], sizeof d->al[0]) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &d->al[1], sizeof d->al[1]) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &d->al[2], sizeof d->al[2]) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &d->al[2], sizeof d->al[2]))
        goto out;
    s = cublasLtMatmulAlgoGetHeuristic(b->h, d->op, d->la, d->lb, d->lc, d->lc, pref, n, res,
                                       found);
    if (s == CUBLAS_STATUS_SUCCESS && *found >= 1)
        rc = 0;
    else if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_SUCCESS)
        rc = -ENOTSUP;
out:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    return rc;
}

/* The pin of this key, or NULL. */
static struct algo_pin *find_pin(struct l8k_blas *b, int kind, enum l8k_dtype out, uint32_t M,
                                 uint32_t N, uint32_t K, const uint32_t al[3])
{
    for (uint32_t i = 0; i < b->n_pins; i++) {
        struct algo_pin *p = &b->pins[i];
        if (p->kind == kind && p->out == out && p->M == M && p->N == N && p->K == K &&
            memcmp(p->align, al, sizeof p->align) == 0)
            return p;
    }
    return NULL;
}

/* One product through cuBLASLt, with the cached (or pinned) algorithm;
 * -ENOTSUP for a shape the heuristic refuses (remembered, so the next call
 * goes to the caller's fallback without asking again). */
static int lt_matmul(struct l8k_blas *b, int kind, const void *w, const void *x, const float *ws,
                     const float *xs, uint32_t M, uint32_t N, uint32_t K, enum l8k_dtype y_dt,
                     void *y, cudaStream_t st)
{
    struct lt_desc d;
    float alpha = 1.0f, beta = 0.0f;
    int rc = desc_make(&d, kind, w, x, ws, xs, M, N, K, y_dt, y);
    if (rc)
        return rc;
    if (b->cache_used >= BLAS_CACHE / 4 * 3) {
        memset(b->cache, 0, sizeof b->cache);
        b->cache_used = 0;
    }
    struct algo_entry *e = cache_slot(b, kind, y_dt, M, N, K, d.al);
    if (!e->valid) {
        cublasLtMatmulHeuristicResult_t res[BLAS_MAX_ALGOS];
        int found = 0;
        /* a pin's rank is among as many candidates as l8k_gemm_fp8_pin asked for */
        const struct algo_pin *pin = find_pin(b, kind, y_dt, M, N, K, d.al);
        const uint32_t i = pin ? pin->index : 0;
        rc = heuristic(b, &d, i ? BLAS_MAX_ALGOS : 1, res, &found);
        if (rc == -ENOTSUP && !i) {
            b->n_refused++;
        } else if (rc || found <= (int)i) {
            desc_free(&d);
            return -EIO;
        }
        b->cache_used++;
        e->kind = kind;
        e->out = y_dt;
        e->M = M; e->N = N; e->K = K;
        memcpy(e->align, d.al, sizeof d.al);
        e->refused = rc == -ENOTSUP;
        if (!e->refused)
            e->algo = res[i].algo;
        e->valid = true;
    }
    if (e->refused) {
        desc_free(&d);
        return -ENOTSUP;
    }
    rc = lt_status(cublasLtMatmul(b->h, d.op, &alpha, w, d.la, x, d.lb, &beta, y, d.lc, y, d.lc,
                                  &e->algo, b->ws, BLAS_WORKSPACE, st));
    desc_free(&d);
    return rc;
}

static int epilogue(enum l8k_dtype y_dt, void *y, const float *xs, const float *ws, uint32_t M,
                    uint32_t N, cudaStream_t st)
{
    const dim3 grid((unsigned)(((size_t)M * N + 255) / 256));
    if (y_dt == L8K_BF16)
        return l8k_launch("scale_epilogue_kernel<bf16>", scale_epilogue_kernel<uint16_t>, grid,
                          dim3(256), st, (uint16_t *)y, xs, ws, M, N);
    return l8k_launch("scale_epilogue_kernel<f32>", scale_epilogue_kernel<float>, grid, dim3(256),
                      st, (float *)y, xs, ws, M, N);
}

/* bf16 scratch of the decode path: W [N, K], then x [M, K] from a 256-byte
 * boundary (cuBLASLt's alignment assumption, see lt_matmul). */
static size_t scr_x_off(uint32_t N, uint32_t K)
{
    const size_t per = BLAS_MAX_ALIGN / 2;
    return ((size_t)N * K + per - 1) / per * per;
}

extern "C" int l8k_blas_reserve(struct l8k_blas *b, uint32_t M, uint32_t N, uint32_t K)
{
    if (!b)
        return -EINVAL;
    size_t need = scr_x_off(N, K) + (size_t)M * K;
    if (need <= b->scr_elems)
        return 0;
    /* Grows only (cudaMalloc cannot be captured in a graph): the engine
     * reserves its largest shape before any capture where this is its path.
     * Where it is only a refused shape's fallback, a graph captured earlier
     * may point at the buffer: that one is kept, not freed. */
    if (b->scr && b->scr_captured) {
        if (b->n_retired == BLAS_RETIRED)
            return -ENOMEM;
        b->retired[b->n_retired++] = b->scr;
        need = need > 2 * b->scr_elems ? need : 2 * b->scr_elems;
    } else if (b->scr && cudaFree(b->scr) != cudaSuccess) {
        return -EIO;
    }
    b->scr = NULL;
    b->scr_elems = 0;
    b->scr_captured = false;
    if (cudaMalloc((void **)&b->scr, need * 2) != cudaSuccess) {
        cudaGetLastError();
        return -ENOMEM;
    }
    b->scr_elems = need;
    return 0;
}

/* Whether st is being captured (an error counts as yes: the safe answer). */
static bool capturing(cudaStream_t st)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(st, &cs) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    return cs != cudaStreamCaptureStatusNone;
}

static int gemm_fp8_path(struct l8k_blas *b, enum l8k_fp8_path p, const uint8_t *wq,
                         const float *ws, const uint8_t *xq, const float *xs, uint32_t M,
                         uint32_t N, uint32_t K, enum l8k_dtype y_dt, void *y, cudaStream_t st)
{
    int rc;
    switch (p) {
    case L8K_FP8_OUTER_VEC:
        return lt_matmul(b, GK_FP8_OUTER, wq, xq, ws, xs, M, N, K, y_dt, y, st);
    case L8K_FP8_EPILOGUE:
        rc = lt_matmul(b, GK_FP8_UNIT, wq, xq, NULL, NULL, M, N, K, y_dt, y, st);
        return rc ? rc : epilogue(y_dt, y, xs, ws, M, N, st);
    case L8K_FP8_BF16: {
        if ((rc = l8k_blas_reserve(b, M, N, K)))
            return rc;
        b->scr_captured |= capturing(st);
        uint16_t *wb = b->scr, *xb = b->scr + scr_x_off(N, K);
        size_t nw = (size_t)N * K, nx = (size_t)M * K;
        if ((rc = l8k_launch("fp8_to_bf16_kernel", fp8_to_bf16_kernel,
                             dim3((unsigned)((nw + 255) / 256)), dim3(256), st, wq, wb, nw)) ||
            (rc = l8k_launch("fp8_to_bf16_kernel", fp8_to_bf16_kernel,
                             dim3((unsigned)((nx + 255) / 256)), dim3(256), st, xq, xb, nx)))
            return rc;
        rc = lt_matmul(b, GK_BF16, wb, xb, NULL, NULL, M, N, K, y_dt, y, st);
        return rc ? rc : epilogue(y_dt, y, xs, ws, M, N, st);
    }
    case L8K_FP8_NONE:
        break;
    }
    return -EINVAL;
}

/* Random E4M3 codes of moderate size (never NaN), so the probe's sums are
 * well conditioned. */
static void probe_fill(uint8_t *c, size_t n, uint32_t *s)
{
    for (size_t i = 0; i < n; i++) {
        *s = *s * 1664525u + 1013904223u;
        uint8_t mag = (uint8_t)(0x20 + ((*s >> 24) % 0x30)); /* exponents ~2^-3 .. 2^2 */
        c[i] = (uint8_t)(mag | ((*s >> 16) & 0x80));
    }
}

static int probe_paths(struct l8k_blas *b, cudaStream_t st)
{
    enum { PM = 7, PN = 64, PK = 128 };
    uint8_t hw[PN * PK], hx[PM * PK];
    float hws[PN], hxs[PM], ref[PM * PN], got[PM * PN];
    uint32_t seed = 12345;
    probe_fill(hw, sizeof hw, &seed);
    probe_fill(hx, sizeof hx, &seed);
    for (int i = 0; i < PN; i++)
        hws[i] = 0.01f * (float)(1 + i % 7);
    for (int i = 0; i < PM; i++)
        hxs[i] = 0.1f * (float)(1 + i);
    uint8_t *dw = NULL, *dx = NULL;
    float *dws = NULL, *dxs = NULL, *dy = NULL;
    int rc = -EIO;
    if (cudaMalloc((void **)&dw, sizeof hw) || cudaMalloc((void **)&dx, sizeof hx) ||
        cudaMalloc((void **)&dws, sizeof hws) || cudaMalloc((void **)&dxs, sizeof hxs) ||
        cudaMalloc((void **)&dy, sizeof ref))
        goto out;
    /* On st, and waited for: a plain cudaMemcpy from pageable memory may
     * return before its DMA lands, and st does not wait for the legacy
     * default stream. */
    if (cudaMemcpyAsync(dw, hw, sizeof hw, cudaMemcpyHostToDevice, st) ||
        cudaMemcpyAsync(dx, hx, sizeof hx, cudaMemcpyHostToDevice, st) ||
        cudaMemcpyAsync(dws, hws, sizeof hws, cudaMemcpyHostToDevice, st) ||
        cudaMemcpyAsync(dxs, hxs, sizeof hxs, cudaMemcpyHostToDevice, st) ||
        cudaStreamSynchronize(st))
        goto out;
    if (l8k_gemv(dw, L8K_FP8, dws, dx, L8K_FP8, dxs, PM, PN, PK, dy, PN, st) ||
        cudaMemcpyAsync(ref, dy, sizeof ref, cudaMemcpyDeviceToHost, st) ||
        cudaStreamSynchronize(st))
        goto out;
    /* Each output dtype separately: a library may take one and not the other. */
    for (int p = L8K_FP8_OUTER_VEC; p <= L8K_FP8_BF16; p++) {
        for (int o = 0; o < 2; o++) {
            const enum l8k_dtype y_dt = o ? L8K_BF16 : L8K_F32;
            cudaMemsetAsync(dy, 0xff, sizeof ref, st); /* NaN poison, either dtype */
            int r = gemm_fp8_path(b, (enum l8k_fp8_path)p, dw, dws, dx, dxs, PM, PN, PK, y_dt,
                                  dy, st);
            double e = -1.0;
            if (r == 0 && cudaStreamSynchronize(st) == cudaSuccess &&
                cudaMemcpy(got, dy, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess) {
                double num = 0, den = 0;
                for (int i = 0; i < PM * PN; i++) {
                    uint32_t u = (uint32_t)((const uint16_t *)got)[i] << 16;
                    float g;
                    memcpy(&g, &u, 4);
                    double d = (double)(o ? g : got[i]) - (double)ref[i];
                    num += d * d;
                    den += (double)ref[i] * ref[i];
                }
                e = den > 0 ? sqrt(num / den) : INFINITY;
                e = e == e ? e : INFINITY;
            }
            b->probe_err[p][o] = e;
            /* NaN, a refusal (-1) or an error too large fail it. */
            b->path_ok[p][o] = e >= 0 && e <= (o ? PROBE_TOL_BF16 : PROBE_TOL);
            cudaGetLastError(); /* a refused mode must not poison later launches */
        }
    }
    rc = 0;
out:
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dws);
    cudaFree(dxs);
    cudaFree(dy);
    return rc;
}

extern "C" int l8k_blas_create(cudaStream_t st, struct l8k_blas **out)
{
    struct l8k_blas *b = (struct l8k_blas *)calloc(1, sizeof *b);
    int rc = -EIO;
    if (!b)
        return -ENOMEM;
    if (cublasLtCreate(&b->h) != CUBLAS_STATUS_SUCCESS) {
        b->h = NULL;
        goto err;
    }
    if (cudaMalloc(&b->ws, BLAS_WORKSPACE) != cudaSuccess) {
        b->ws = NULL;
        rc = -ENOMEM;
        goto err;
    }
    if ((rc = probe_paths(b, st)))
        goto err;
    b->n_refused = 0;   /* the probe's refusals only chose the paths */
    /* The first that passed, in order of speed; f32 out is required. */
    for (int o = 0; o < 2; o++) {
        b->path[o] = L8K_FP8_NONE;
        for (int p = L8K_FP8_BF16; p >= L8K_FP8_OUTER_VEC; p--)
            if (b->path_ok[p][o])
                b->path[o] = (enum l8k_fp8_path)p;
    }
    if (b->path[0] == L8K_FP8_NONE) {
        rc = -ENOTSUP;
        goto err;
    }
    *out = b;
    return 0;
err:
    l8k_blas_destroy(b);
    return rc;
}

extern "C" void l8k_blas_destroy(struct l8k_blas *b)
{
    if (!b)
        return;
    if (b->scr)
        cudaFree(b->scr);
    for (uint32_t i = 0; i < b->n_retired; i++)
        cudaFree(b->retired[i]);
    if (b->ws)
        cudaFree(b->ws);
    if (b->h)
        cublasLtDestroy(b->h);
    free(b);
}

static int out_index(enum l8k_dtype y_dt)
{
    return y_dt == L8K_F32 ? 0 : y_dt == L8K_BF16 ? 1 : -1;
}

extern "C" enum l8k_fp8_path l8k_blas_fp8_path(const struct l8k_blas *b, enum l8k_dtype y_dt)
{
    const int o = out_index(y_dt);
    return o < 0 ? L8K_FP8_NONE : b->path[o];
}

extern "C" double l8k_blas_probe_err(const struct l8k_blas *b, enum l8k_fp8_path p,
                                     enum l8k_dtype y_dt)
{
    const int o = out_index(y_dt);
    return (unsigned)p > L8K_FP8_BF16 || o < 0 ? -1.0 : b->probe_err[p][o];
}

extern "C" int l8k_blas_set_fp8_path(struct l8k_blas *b, enum l8k_dtype y_dt,
                                     enum l8k_fp8_path p)
{
    const int o = out_index(y_dt);
    if (o < 0 || p < L8K_FP8_NONE || p > L8K_FP8_BF16 || (p == L8K_FP8_NONE && o == 0))
        return -EINVAL;
    if (p != L8K_FP8_NONE && !b->path_ok[p][o])
        return -ENOTSUP;
    b->path[o] = p;
    return 0;
}

/* l8k_gemm_fp8's arguments: 0, -EINVAL, or -ENOTSUP (no path for y_dt). */
static int gemm_fp8_check(const struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                          const uint8_t *xq, const float *x_scale, uint32_t N, uint32_t K,
                          enum l8k_dtype y_dt, const void *y)
{
    /* FP8 products need 16-byte leading dimensions: K for the codes, and
     * N for the output (N % 4 in f32, N % 8 in bf16). */
    const int o = out_index(y_dt);
    if (!b || !wq || !w_scale || !xq || !x_scale || !y || N == 0 || K == 0 || K % 16 || o < 0 ||
        N % (y_dt == L8K_F32 ? 4 : 8) || !l8k_aligned16(wq) || !l8k_aligned16(xq) ||
        !l8k_aligned16(y))
        return -EINVAL;
    return b->path[o] == L8K_FP8_NONE ? -ENOTSUP : 0;
}

extern "C" uint32_t l8k_blas_refused(const struct l8k_blas *b)
{
    return b ? b->n_refused : 0;
}

/* The paths a product of output o tries, in order: the chosen one, then
 * the slower ones whose probe passed. The probe runs at one small shape;
 * the library may still refuse a real one (a mode's kernels need not cover
 * every M, N, K), and the same product on the next path is only slower. */
static bool next_path(const struct l8k_blas *b, int o, int *p)
{
    for (*p = *p < 0 ? (int)b->path[o] : *p + 1; *p <= L8K_FP8_BF16; (*p)++)
        if (b->path_ok[*p][o])
            return true;
    return false;
}

extern "C" int l8k_gemm_fp8(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                            const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N,
                            uint32_t K, enum l8k_dtype y_dt, void *y, cudaStream_t st)
{
    int rc = gemm_fp8_check(b, wq, w_scale, xq, x_scale, N, K, y_dt, y);
    if (rc || M == 0)
        return rc;
    for (int p = -1; next_path(b, out_index(y_dt), &p);)
        if ((rc = gemm_fp8_path(b, (enum l8k_fp8_path)p, wq, w_scale, xq, x_scale, M, N, K, y_dt,
                                y, st)) != -ENOTSUP)
            return rc;
    return -EIO;   /* every path refused this shape */
}

/* The candidates for this product on the path l8k_gemm_fp8 takes for it
 * (FP8 tensor-core paths only: the bf16 decode path's operands are the
 * scratch's): in res, n of them. */
static int gemm_fp8_candidates(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                               const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N,
                               uint32_t K, enum l8k_dtype y_dt, const void *y, int *kind,
                               uint32_t al[3], cublasLtMatmulHeuristicResult_t *res, int *n)
{
    int rc = gemm_fp8_check(b, wq, w_scale, xq, x_scale, N, K, y_dt, y);
    if (rc)
        return rc;
    if (M == 0)
        return -EINVAL;
    const int want = *n;
    for (int p = -1; next_path(b, out_index(y_dt), &p) && p != L8K_FP8_BF16;) {
        *kind = p == L8K_FP8_OUTER_VEC ? GK_FP8_OUTER : GK_FP8_UNIT;
        const bool outer = *kind == GK_FP8_OUTER;
        struct lt_desc d;
        if ((rc = desc_make(&d, *kind, wq, xq, outer ? w_scale : NULL, outer ? x_scale : NULL, M,
                            N, K, y_dt, y)))
            return rc;
        memcpy(al, d.al, sizeof d.al);
        *n = want;
        rc = heuristic(b, &d, *n, res, n);
        desc_free(&d);
        if (rc != -ENOTSUP)
            return rc;
    }
    return -ENOTSUP;
}

extern "C" int l8k_gemm_fp8_algos(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                                  const uint8_t *xq, const float *x_scale, uint32_t M,
                                  uint32_t N, uint32_t K, enum l8k_dtype y_dt, const void *y)
{
    cublasLtMatmulHeuristicResult_t res[BLAS_MAX_ALGOS];
    int kind, n = BLAS_MAX_ALGOS;
    uint32_t al[3];
    int rc = gemm_fp8_candidates(b, wq, w_scale, xq, x_scale, M, N, K, y_dt, y, &kind, al, res,
                                 &n);
    return rc ? rc : n;
}

extern "C" int l8k_gemm_fp8_pin(struct l8k_blas *b, const uint8_t *wq, const float *w_scale,
                                const uint8_t *xq, const float *x_scale, uint32_t M, uint32_t N,
                                uint32_t K, enum l8k_dtype y_dt, const void *y, uint32_t index)
{
    cublasLtMatmulHeuristicResult_t res[BLAS_MAX_ALGOS];
    int kind, n = BLAS_MAX_ALGOS;
    uint32_t al[3];
    if (index >= BLAS_MAX_ALGOS)
        return -ENOENT;
    int rc = gemm_fp8_candidates(b, wq, w_scale, xq, x_scale, M, N, K, y_dt, y, &kind, al, res,
                                 &n);
    if (rc)
        return rc;
    if ((int)index >= n)
        return -ENOENT;
    struct algo_pin *p = find_pin(b, kind, y_dt, M, N, K, al);
    if (!p) {
        if (b->n_pins == BLAS_PINS)
            return -ENOSPC;
        p = &b->pins[b->n_pins++];
        *p = (struct algo_pin){ kind, y_dt, M, N, K, { al[0], al[1], al[2] }, 0 };
    }
    p->index = index;
    /* and the cache's entry, if there is one, changes with it */
    struct algo_entry *e = cache_slot(b, kind, y_dt, M, N, K, al);
    if (e->valid)
        e->algo = res[index].algo;
    return 0;
}

extern "C" int l8k_gemm_bf16(struct l8k_blas *b, const uint16_t *w, const uint16_t *x, uint32_t M,
                             uint32_t N, uint32_t K, float *y, cudaStream_t st)
{
    if (!b || !w || !x || !y || N == 0 || K == 0 || K % 8 || !l8k_aligned16(w) ||
        !l8k_aligned16(x) || !l8k_aligned16(y))
        return -EINVAL;
    if (M == 0)
        return 0;
    return lt_matmul(b, GK_BF16, w, x, NULL, NULL, M, N, K, L8K_F32, y, st);
}
