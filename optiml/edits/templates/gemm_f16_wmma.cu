// optiml template gemm_f16_wmma: C = epilogue(A x B) with fp16 (or bf16) inputs on the tensor cores
// (WMMA 16x16x16 fragments, fp32 accumulation).
//
// A block of OPTIML_WARPS_M x OPTIML_WARPS_N warps computes a BM x BN tile of C, each warp a
// (TM x 16) x (TN x 16) tile as TM x TN accumulator fragments; K is walked BK at a time through
// shared memory (both tiles row-major, padded by 8 halves). Every load and store is guarded, so any
// M, N, K work. Operands through macros, as in gemm_f32_warp: OPTIML_A(m, k) and OPTIML_B(k, n) give the
// input elements (OPTIML_T, their type), OPTIML_C(m, n) the output lvalue, OPTIML_M/N/K the sizes,
// and OPTIML_EPILOGUE(acc, m, n) turns each fp32 accumulator into the stored value.
//
// Tuned: OPTIML_WARPS_M, OPTIML_WARPS_N, OPTIML_TM, OPTIML_TN (fragments per warp), OPTIML_BK
// (a multiple of 16); static_asserts refuse what the body cannot run.
#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef OPTIML_WARPS_M
#define OPTIML_WARPS_M 2
#endif
#ifndef OPTIML_WARPS_N
#define OPTIML_WARPS_N 2
#endif
#ifndef OPTIML_TM
#define OPTIML_TM 2
#endif
#ifndef OPTIML_TN
#define OPTIML_TN 4
#endif
#ifndef OPTIML_BK
#define OPTIML_BK 32
#endif
#ifndef OPTIML_A
#define OPTIML_T __half
#define OPTIML_A(m, k) A[(size_t)(m) * K + (k)]
#define OPTIML_B(k, n) B[(size_t)(k) * N + (n)]
#define OPTIML_C(m, n) C[(size_t)(m) * N + (n)]
#define OPTIML_M M
#define OPTIML_N N
#define OPTIML_K K
#define OPTIML_EPILOGUE(acc, m, n) __float2half(acc)
#endif

__global__ void __launch_bounds__(32 * OPTIML_WARPS_M * OPTIML_WARPS_N)
optiml_gemm_f16_wmma(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    using namespace nvcuda;
    constexpr int WARPS_M = OPTIML_WARPS_M, WARPS_N = OPTIML_WARPS_N, TM = OPTIML_TM, TN = OPTIML_TN, BK = OPTIML_BK;
    constexpr int BM = WARPS_M * TM * 16, BN = WARPS_N * TN * 16, THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int LDA = BK + 8, LDB = BN + 8;
    static_assert(BK % 16 == 0, "gemm_f16_wmma: BK must be a multiple of 16");
    static_assert(THREADS <= 1024, "gemm_f16_wmma: at most 1024 threads a block");
    static_assert((BM * LDA + BK * LDB) * 2 + WARPS_M * WARPS_N * 256 * 4 <= 48 * 1024,
                  "gemm_f16_wmma: the tiles must fit 48 KiB of shared memory");
    __shared__ __align__(32) OPTIML_T As[BM * LDA];
    __shared__ __align__(32) OPTIML_T Bs[BK * LDB];
    __shared__ __align__(32) float Cw[WARPS_M * WARPS_N][256];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const OPTIML_T zero = OPTIML_T(0.0f);
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < Kx; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK, gm = m0 + m, gk = k0 + k;
            As[m * LDA + k] = (gm < Mx && gk < Kx) ? OPTIML_T(OPTIML_A(gm, gk)) : zero;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
#if OPTIML_B_ALONG_K
            const int n = i / BK, k = i % BK;
#else
            const int k = i / BN, n = i % BN;
#endif
            const int gn = n0 + n, gk = k0 + k;
            Bs[k * LDB + n] = (gn < Nx && gk < Kx) ? OPTIML_T(OPTIML_B(gk, gn)) : zero;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, OPTIML_T, wmma::row_major> a[TM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, OPTIML_T, wmma::row_major> b[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) wmma::load_matrix_sync(a[i], &As[(wm * TM * 16 + i * 16) * LDA + kk], LDA);
#pragma unroll
            for (int j = 0; j < TN; j++) wmma::load_matrix_sync(b[j], &Bs[kk * LDB + wn * TN * 16 + j * 16], LDB);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    // each fragment through the warp's staging tile, then the epilogue element by element
#pragma unroll
    for (int i = 0; i < TM; i++) {
#pragma unroll
        for (int j = 0; j < TN; j++) {
            wmma::store_matrix_sync(Cw[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int gm = m0 + wm * TM * 16 + i * 16 + e / 16, gn = n0 + wn * TN * 16 + j * 16 + e % 16;
                if (gm < Mx && gn < Nx) {
                    const float optiml_acc = Cw[warp][e];
                    OPTIML_C(gm, gn) = OPTIML_EPILOGUE(optiml_acc, gm, gn);
                }
            }
            __syncwarp();
        }
    }
}
