// optiml template gemm_f32: C = epilogue(A x B) in fp32 on the SIMT cores, 2-D register blocking.
//
// Each block computes a BM x BN tile of C with (BM / TM) * (BN / TN) threads, each thread a TM x TN
// sub-tile held in registers; the K dimension is walked BK at a time through shared memory (A's tile
// stored transposed, As[k][m], so a thread's TM values of one k are contiguous). Every load and store
// is guarded, so any M, N, K work. The operands are reached through macros, so the same body serves
// any layout: OPTIML_A(m, k), OPTIML_B(k, n), OPTIML_C(m, n) (an lvalue), OPTIML_M/N/K, and the
// epilogue OPTIML_EPILOGUE(acc, m, n) applied to each accumulator before it is stored. optiml
// instantiates it behind the user's own entry signature (the line marked optiml:template-signature)
// with those macros written for the user's arguments; standalone, it is C = A x B, all row-major.
//
// Tuned: OPTIML_BM, OPTIML_BN, OPTIML_BK, OPTIML_TM, OPTIML_TN (static_asserts refuse a combination
// the body cannot run, so such a point fails to compile instead of computing a wrong answer).
#ifndef OPTIML_BM
#define OPTIML_BM 64
#endif
#ifndef OPTIML_BN
#define OPTIML_BN 64
#endif
#ifndef OPTIML_BK
#define OPTIML_BK 8
#endif
#ifndef OPTIML_TM
#define OPTIML_TM 4
#endif
#ifndef OPTIML_TN
#define OPTIML_TN 4
#endif
#ifndef OPTIML_A
#define OPTIML_A(m, k) A[(size_t)(m) * K + (k)]
#define OPTIML_B(k, n) B[(size_t)(k) * N + (n)]
#define OPTIML_C(m, n) C[(size_t)(m) * N + (n)]
#define OPTIML_M M
#define OPTIML_N N
#define OPTIML_K K
#define OPTIML_EPILOGUE(acc, m, n) (acc)
#endif

__global__ void __launch_bounds__((OPTIML_BM / OPTIML_TM) * (OPTIML_BN / OPTIML_TN))
optiml_gemm_f32(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    constexpr int BM = OPTIML_BM, BN = OPTIML_BN, BK = OPTIML_BK, TM = OPTIML_TM, TN = OPTIML_TN;
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(BM % TM == 0 && BN % TN == 0, "gemm_f32: BM must be a multiple of TM and BN of TN");
    static_assert(THREADS >= 32 && THREADS <= 1024, "gemm_f32: (BM / TM) * (BN / TN) threads must be 32 to 1024");
    static_assert((BK * (BM + BN) + 8) * 4 <= 48 * 1024, "gemm_f32: the tiles must fit 48 KiB of shared memory");
    __shared__ float As[BK][BM + 4];
    __shared__ float Bs[BK][BN + 4];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < Kx; k0 += BK) {
        for (int i = tid; i < BM * BK; i += THREADS) {
            const int m = i / BK, k = i % BK, gm = m0 + m, gk = k0 + k;
            As[k][m] = (gm < Mx && gk < Kx) ? OPTIML_A(gm, gk) : 0.0f;
        }
        for (int i = tid; i < BK * BN; i += THREADS) {
#if OPTIML_B_ALONG_K
            const int n = i / BK, k = i % BK;      // B's k is contiguous in memory: walk it first
#else
            const int k = i / BN, n = i % BN;      // B's n is contiguous in memory: walk it first
#endif
            const int gn = n0 + n, gk = k0 + k;
            Bs[k][n] = (gn < Nx && gk < Kx) ? OPTIML_B(gk, gn) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) a[i] = As[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; j++) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int gm = m0 + ty * TM + i;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int gn = n0 + tx * TN + j;
            if (gm < Mx && gn < Nx) {
                const float optiml_acc = acc[i][j];
                OPTIML_C(gm, gn) = OPTIML_EPILOGUE(optiml_acc, gm, gn);
            }
        }
    }
}
