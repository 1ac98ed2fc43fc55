// optiml template gemm_f32_vec: C = epilogue(A x B) in fp32 on the SIMT cores, 2-D register blocking
// with 16-byte loads: gemm_f32's structure (a BM x BN tile of C per block, a TM x TN tile per thread in
// registers, BK-deep tiles of A and B in shared memory, A's stored transposed) where a tile lies wholly
// inside the matrices and its rows are 16-byte aligned, the global loads are float4 and each thread
// reads its TM and TN values of one k as float4 from shared memory; tiles on the edges are loaded one
// guarded element at a time, so any M, N, K work. Operands through the same macros as gemm_f32
// (OPTIML_A, OPTIML_B, OPTIML_C, OPTIML_M/N/K, OPTIML_EPILOGUE), plus OPTIML_A_PTR/OPTIML_B_PTR (the
// arrays, for the float4 loads), OPTIML_A_ALONG_M and OPTIML_B_ALONG_K (which index is contiguous).
//
// Tuned: OPTIML_BM, OPTIML_BN, OPTIML_BK, OPTIML_TM, OPTIML_TN (TM, TN and BK multiples of 4;
// static_asserts refuse the rest at compile time).
#ifndef OPTIML_BM
#define OPTIML_BM 128
#endif
#ifndef OPTIML_BN
#define OPTIML_BN 128
#endif
#ifndef OPTIML_BK
#define OPTIML_BK 8
#endif
#ifndef OPTIML_TM
#define OPTIML_TM 8
#endif
#ifndef OPTIML_TN
#define OPTIML_TN 8
#endif
#ifndef OPTIML_A
#define OPTIML_A(m, k) A[(size_t)(m) * K + (k)]
#define OPTIML_B(k, n) B[(size_t)(k) * N + (n)]
#define OPTIML_C(m, n) C[(size_t)(m) * N + (n)]
#define OPTIML_A_PTR A
#define OPTIML_B_PTR B
#define OPTIML_M M
#define OPTIML_N N
#define OPTIML_K K
#define OPTIML_A_ALONG_M 0
#define OPTIML_B_ALONG_K 0
#define OPTIML_EPILOGUE(acc, m, n) (acc)
#endif

__global__ void __launch_bounds__((OPTIML_BM / OPTIML_TM) * (OPTIML_BN / OPTIML_TN))
optiml_gemm_f32_vec(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    constexpr int BM = OPTIML_BM, BN = OPTIML_BN, BK = OPTIML_BK, TM = OPTIML_TM, TN = OPTIML_TN;
    constexpr int THREADS = (BM / TM) * (BN / TN);
    static_assert(BM % TM == 0 && BN % TN == 0, "gemm_f32_vec: BM must be a multiple of TM and BN of TN");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "gemm_f32_vec: TM, TN and BK must be multiples of 4");
    static_assert(THREADS >= 32 && THREADS <= 1024, "gemm_f32_vec: (BM / TM) * (BN / TN) threads must be 32 to 1024");
    static_assert(BK * (BM + BN) * 4 <= 48 * 1024, "gemm_f32_vec: the tiles must fit 48 KiB of shared memory");
    __shared__ __align__(16) float As[BK][BM];
    __shared__ __align__(16) float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN), ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const float* __restrict__ Ap = OPTIML_A_PTR;
    const float* __restrict__ Bp = OPTIML_B_PTR;
    // 16-byte rows: the contiguous extent a multiple of 4 and the arrays aligned
    const bool a_vec = ((OPTIML_A_ALONG_M ? Mx : Kx) % 4 == 0) && ((reinterpret_cast<size_t>(Ap) & 15) == 0);
    const bool b_vec = ((OPTIML_B_ALONG_K ? Kx : Nx) % 4 == 0) && ((reinterpret_cast<size_t>(Bp) & 15) == 0);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < Kx; k0 += BK) {
        const bool inside_a = a_vec && m0 + BM <= Mx && k0 + BK <= Kx;
        const bool inside_b = b_vec && n0 + BN <= Nx && k0 + BK <= Kx;
        if (inside_a) {
            for (int i = tid; i < BM * BK / 4; i += THREADS) {
#if OPTIML_A_ALONG_M
                const int k = i / (BM / 4), m = (i % (BM / 4)) * 4;          // A is K x M: 4 m's of one k
                const float4 v = *reinterpret_cast<const float4*>(&OPTIML_A(m0 + m, k0 + k));
                *reinterpret_cast<float4*>(&As[k][m]) = v;
#else
                const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;          // A is M x K: 4 k's of one m
                const float4 v = *reinterpret_cast<const float4*>(&OPTIML_A(m0 + m, k0 + k));
                As[k][m] = v.x; As[k + 1][m] = v.y; As[k + 2][m] = v.z; As[k + 3][m] = v.w;
#endif
            }
        } else {
            for (int i = tid; i < BM * BK; i += THREADS) {
                const int m = i / BK, k = i % BK, gm = m0 + m, gk = k0 + k;
                As[k][m] = (gm < Mx && gk < Kx) ? OPTIML_A(gm, gk) : 0.0f;
            }
        }
        if (inside_b) {
            for (int i = tid; i < BN * BK / 4; i += THREADS) {
#if OPTIML_B_ALONG_K
                const int n = i / (BK / 4), k = (i % (BK / 4)) * 4;          // B is N x K: 4 k's of one n
                const float4 v = *reinterpret_cast<const float4*>(&OPTIML_B(k0 + k, n0 + n));
                Bs[k][n] = v.x; Bs[k + 1][n] = v.y; Bs[k + 2][n] = v.z; Bs[k + 3][n] = v.w;
#else
                const int k = i / (BN / 4), n = (i % (BN / 4)) * 4;          // B is K x N: 4 n's of one k
                const float4 v = *reinterpret_cast<const float4*>(&OPTIML_B(k0 + k, n0 + n));
                *reinterpret_cast<float4*>(&Bs[k][n]) = v;
#endif
            }
        } else {
            for (int i = tid; i < BK * BN; i += THREADS) {
#if OPTIML_B_ALONG_K
                const int n = i / BK, k = i % BK;
#else
                const int k = i / BN, n = i % BN;
#endif
                const int gn = n0 + n, gk = k0 + k;
                Bs[k][n] = (gn < Nx && gk < Kx) ? OPTIML_B(gk, gn) : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[k][ty * TM + i]);
                a[i] = v.x; a[i + 1] = v.y; a[i + 2] = v.z; a[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[k][tx * TN + j]);
                b[j] = v.x; b[j + 1] = v.y; b[j + 2] = v.z; b[j + 3] = v.w;
            }
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
