/* cublaslt_emu.cc - the subset of cuBLASLt that kernels/gemm.cu calls, on
 * the CPU, for the emulated engine tests (see cuemu.h).
 *
 * It keeps the real library's rules where a mistake of ours would show:
 * FP8 operands only as "TN" (A transposed, B not) and only from sm_89 on
 * (CUEMU_SM), 16-byte aligned pointers
 * and leading dimensions for FP8, scale modes per operand (a scalar or,
 * CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, one f32 per row of op(A) and
 * per column of op(B)), f32 or bf16 outputs (C of D's type), operands in
 * device memory, and work ordered on the stream (so it is captured into
 * graphs). Sums are f32 over exact products,
 * as the tensor cores promote them (without their reduced-precision partial
 * sums inside an instruction). The heuristic's candidates differ as the real
 * ones do, by rounding only: candidate r splits K into r + 1 slices (split-K),
 * so a pinned candidate shows in the bits of what it computes.
 * CUEMU_LT_REFUSE=outer:M (or fp8:M) makes the heuristic refuse, as the
 * real one may for a shape its kernels do not cover, every outer-vector
 * scaled (or every FP8) product with at least M columns of op(B). */
#include "cuemu.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <vector>

namespace {

struct Desc {
    int32_t trans[2] = { CUBLAS_OP_N, CUBLAS_OP_N };
    int32_t scale_mode[2] = { CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                              CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F };
    const float *scale[2] = { nullptr, nullptr };
    cublasComputeType_t compute;
    cudaDataType_t scale_type;
};

struct Layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};

struct Pref {
    uint32_t align[4] = { 256, 256, 256, 256 };
};

size_t elt_size(cudaDataType_t t)
{
    switch (t) {
    case CUDA_R_8F_E4M3: return 1;
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    default: return 0;
    }
}

float load(const void *base, cudaDataType_t t, size_t i)
{
    switch (t) {
    case CUDA_R_8F_E4M3: {
        __half_raw h = __nv_cvt_fp8_to_halfraw(((const __nv_fp8_storage_t *)base)[i], __NV_E4M3);
        return __half2float(__half(h));
    }
    case CUDA_R_16BF: {
        uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: return ((const float *)base)[i];
    }
}

/* Nearest even, NaN kept (a quiet NaN of the same sign). */
uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* op(X) as a dense row-major [rows x k] f32 copy: row r is row r of op(X) for
 * A (so op(A) is m x k) and column r of op(B) for B (so op(B)^T is n x k). */
std::vector<float> unpack(const void *x, const Layout &l, bool trans, bool is_b, uint64_t *rows,
                          uint64_t *k)
{
    /* Stored column-major rows x cols; op(X) = X or X^T. */
    uint64_t op_rows = trans ? l.cols : l.rows, op_cols = trans ? l.rows : l.cols;
    uint64_t R = is_b ? op_cols : op_rows, K = is_b ? op_rows : op_cols;
    std::vector<float> out(R * K);
    for (uint64_t r = 0; r < R; r++)
        for (uint64_t c = 0; c < K; c++) {
            /* element (i, j) of op(X) */
            uint64_t i = is_b ? c : r, j = is_b ? r : c;
            uint64_t si = trans ? j : i, sj = trans ? i : j;   /* element of X */
            out[r * K + c] = load(x, l.type, si + sj * (uint64_t)l.ld);
        }
    *rows = R;
    *k = K;
    return out;
}

bool aligned(const void *p, uint32_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

bool fp8(const Layout *l) { return l->type == CUDA_R_8F_E4M3; }

/* What the real library refuses for these operands (gemm.cu must never ask). */
cublasStatus_t check(const Desc *d, const Layout *a, const Layout *b, const Layout *c,
                     const Layout *dd)
{
    if (!d || !a || !b || !c || !dd)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale_type != CUDA_R_32F ||
        !elt_size(a->type) || a->type != b->type || c->type != dd->type ||
        (dd->type != CUDA_R_32F && dd->type != CUDA_R_16BF))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    uint64_t m = d->trans[0] == CUBLAS_OP_T ? a->cols : a->rows;
    uint64_t ka = d->trans[0] == CUBLAS_OP_T ? a->rows : a->cols;
    uint64_t kb = d->trans[1] == CUBLAS_OP_T ? b->cols : b->rows;
    uint64_t n = d->trans[1] == CUBLAS_OP_T ? b->rows : b->cols;
    if (ka != kb || c->rows != m || c->cols != n || dd->rows != m || dd->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((uint64_t)a->ld < a->rows || (uint64_t)b->ld < b->rows || (uint64_t)dd->ld < dd->rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (fp8(a)) {
        if (cuemu::sm() < 89)
            return CUBLAS_STATUS_NOT_SUPPORTED;   /* no FP8 tensor cores before Ada */
        if (d->trans[0] != CUBLAS_OP_T || d->trans[1] != CUBLAS_OP_N)
            return CUBLAS_STATUS_NOT_SUPPORTED;   /* FP8 tensor cores take TN only */
        if (a->ld % 16 || b->ld % 16 || (dd->ld * elt_size(dd->type)) % 16)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    for (int i = 0; i < 2; i++)
        if (d->scale_mode[i] != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
            (d->scale_mode[i] != CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F || !fp8(a)))
            return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

/* x . y over [t0, t1): 8 partial sums, as a tensor-core tile keeps. */
float dot(const float *x, const float *y, uint64_t t0, uint64_t t1)
{
    float part[8] = { 0 };
    uint64_t t = t0;
    for (; t + 8 <= t1; t += 8)
        for (int u = 0; u < 8; u++)
            part[u] += x[t + u] * y[t + u];
    for (; t < t1; t++)
        part[0] += x[t] * y[t];
    return ((part[0] + part[1]) + (part[2] + part[3])) +
           ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace

extern "C" {

size_t cublasLtGetVersion(void)
{
    return CUBLAS_VERSION;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = (cublasLtHandle_t) new char;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    delete (char *)h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale_type)
{
    Desc *x = new Desc;
    x->compute = compute;
    x->scale_type = scale_type;
    *d = (cublasLtMatmulDesc_t)x;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    delete (Desc *)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    Desc *d = (Desc *)desc;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (size != 4)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->trans[attr == CUBLASLT_MATMUL_DESC_TRANSB], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
        if (size != 4)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->scale_mode[attr == CUBLASLT_MATMUL_DESC_B_SCALE_MODE], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
        if (size != sizeof(void *))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->scale[attr == CUBLASLT_MATMUL_DESC_B_SCALE_POINTER], buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "cublaslt_emu: matmul attribute %d is not emulated\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    *l = (cublasLtMatrixLayout_t) new Layout { type, rows, cols, ld };
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    delete (Layout *)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t) new Pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    delete (Pref *)p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    Pref *p = (Pref *)pref;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return size == 8 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        if (size != 4)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "cublaslt_emu: preference attribute %d is not emulated\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

/* CUEMU_LT_REFUSE (see the top), read at each query so a test can change it. */
static bool refused(const Desc *d, const Layout *a, const Layout *b)
{
    const char *e = getenv("CUEMU_LT_REFUSE");
    unsigned long m;
    if (!e || !*e)
        return false;
    if (!strncmp(e, "outer:", 6))
        m = strtoul(e + 6, NULL, 10);
    else if (!strncmp(e, "fp8:", 4))
        m = strtoul(e + 4, NULL, 10);
    else {
        fprintf(stderr, "cublaslt_emu: CUEMU_LT_REFUSE=%s: want outer:M or fp8:M\n", e);
        abort();
    }
    const bool outer = d->scale_mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    return fp8(a) && (e[0] == 'f' || outer) && b->cols >= m;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *found)
{
    *found = 0;
    if (requested < 1 || !pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check((Desc *)desc, (Layout *)a, (Layout *)b, (Layout *)c, (Layout *)d);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    const Pref *p = (const Pref *)pref;
    if (fp8((Layout *)a) && (p->align[0] < 16 || p->align[1] < 16 || p->align[3] < 16))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (refused((const Desc *)desc, (const Layout *)a, (const Layout *)b))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* Up to 4 candidates, equal up to rounding; each remembers the alignment
     * it was chosen for, and its rank (its split of K). */
    for (int i = 0; i < requested && i < 4; i++) {
        memset(&res[i], 0, sizeof res[i]);
        memcpy(res[i].algo.data, p->align, sizeof p->align);
        res[i].algo.data[2] = (uint64_t)i;
        res[i].state = CUBLAS_STATUS_SUCCESS;
        res[i].wavesCount = 1.0f;
        *found = i + 1;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t la, const void *B,
                              cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                              cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t st)
{
    const Desc d = *(Desc *)desc;
    const Layout a = *(Layout *)la, b = *(Layout *)lb, c = *(Layout *)lc, dl = *(Layout *)ld;
    cublasStatus_t s = check(&d, &a, &b, &c, &dl);
    if (s != CUBLAS_STATUS_SUCCESS || !algo)
        return s != CUBLAS_STATUS_SUCCESS ? s : CUBLAS_STATUS_INVALID_VALUE;
    uint32_t al[4];
    memcpy(al, algo->data, sizeof al);
    const uint64_t slices = algo->data[2] + 1;
    if (!aligned(A, al[0]) || !aligned(B, al[1]) || !aligned(C, al[2]) || !aligned(D, al[3])) {
        fprintf(stderr, "cublaslt_emu: operand less aligned than the algorithm was chosen for\n");
        return CUBLAS_STATUS_INVALID_VALUE;   /* the real one may fault instead */
    }
    size_t ea = elt_size(a.type);
    if (!cuemu::device_range(A, ((a.cols - 1) * a.ld + a.rows) * ea) ||
        !cuemu::device_range(B, ((b.cols - 1) * b.ld + b.rows) * ea) ||
        !cuemu::device_range(D, ((dl.cols - 1) * dl.ld + dl.rows) * elt_size(dl.type))) {
        fprintf(stderr, "cublaslt_emu: an operand is not (entirely) in device memory\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int i = 0; i < 2; i++) {
        uint64_t n = d.scale_mode[i] == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                         ? (i == 0 ? dl.rows : dl.cols) : 1;
        if (d.scale[i] && !cuemu::device_range(d.scale[i], n * 4)) {
            fprintf(stderr, "cublaslt_emu: scale vector %c is not in device memory\n", 'A' + i);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    const float al_v = *(const float *)alpha, be_v = *(const float *)beta;
    cuemu::submit(st, [=]() {
        uint64_t m, n, k, k2;
        std::vector<float> ua = unpack(A, a, d.trans[0] == CUBLAS_OP_T, false, &m, &k);
        std::vector<float> ub = unpack(B, b, d.trans[1] == CUBLAS_OP_T, true, &n, &k2);
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) {
                float sum = 0.0f;
                for (uint64_t sl = 0; sl < slices; sl++)
                    sum += dot(&ua[i * k], &ub[j * k], k * sl / slices, k * (sl + 1) / slices);
                float sa = d.scale[0] ? (d.scale_mode[0] == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                             ? d.scale[0][i] : d.scale[0][0]) : 1.0f;
                float sb = d.scale[1] ? (d.scale_mode[1] == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
                                             ? d.scale[1][j] : d.scale[1][0]) : 1.0f;
                float v = al_v * (sa * sb * sum);
                if (be_v != 0.0f)
                    v += be_v * load(C, c.type, i + j * c.ld);
                if (dl.type == CUDA_R_16BF)
                    ((uint16_t *)D)[i + j * dl.ld] = to_bf16(v);
                else
                    ((float *)D)[i + j * dl.ld] = v;
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
