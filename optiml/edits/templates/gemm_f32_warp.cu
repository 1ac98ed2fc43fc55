// optiml template gemm_f32_warp: C = epilogue(A x B) in fp32 on the SIMT cores, warp tiling and
// double-buffered shared memory.
//
// A block computes a BM x BN tile of C; each warp a WM x WN part of it; each thread TM x TN outputs in
// registers, as TM/4 x TN/4 chunks of 4 x 4 spread WM/(TM/4) and WN/(TN/4) apart, so the lanes of a
// warp read distinct 16-byte words of shared memory or the same one (no bank conflicts). K is walked
// BK at a time: the next tiles of A and B are loaded into registers (16-byte loads where the tile lies
// inside the matrices and its rows are aligned, guarded single elements elsewhere, so any M, N, K work)
// while the current ones in shared memory are multiplied, then stored into the other of two shared
// buffers (A and B both kept k-major, padded by 4 floats): one barrier per tile.
//
// Operands through macros as in the other templates: OPTIML_A(m, k), OPTIML_B(k, n), OPTIML_C(m, n),
// OPTIML_A_PTR / OPTIML_B_PTR (the arrays), OPTIML_M/N/K, OPTIML_A_ALONG_M / OPTIML_B_ALONG_K (which
// index is contiguous) and OPTIML_EPILOGUE(acc, m, n).
//
// Tuned: OPTIML_BM, OPTIML_BN, OPTIML_BK, OPTIML_WM, OPTIML_WN, OPTIML_TM, OPTIML_TN (TM and TN
// multiples of 4, (WM / TM) * (WN / TN) == 32 lanes), OPTIML_GROUP_M (the blocks' order: bands of
// GROUP_M tile rows, 1 for row by row); static_asserts refuse the rest at compile time.
#ifndef OPTIML_BM
#define OPTIML_BM 128
#endif
#ifndef OPTIML_BN
#define OPTIML_BN 128
#endif
#ifndef OPTIML_BK
#define OPTIML_BK 16
#endif
#ifndef OPTIML_WM
#define OPTIML_WM 64
#endif
#ifndef OPTIML_WN
#define OPTIML_WN 32
#endif
#ifndef OPTIML_TM
#define OPTIML_TM 8
#endif
#ifndef OPTIML_TN
#define OPTIML_TN 8
#endif
#ifndef OPTIML_GROUP_M
#define OPTIML_GROUP_M 1
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

__global__ void __launch_bounds__((OPTIML_BM / OPTIML_WM) * (OPTIML_BN / OPTIML_WN) * 32)
optiml_gemm_f32_warp(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    constexpr int BM = OPTIML_BM, BN = OPTIML_BN, BK = OPTIML_BK, WM = OPTIML_WM, WN = OPTIML_WN;
    constexpr int TM = OPTIML_TM, TN = OPTIML_TN;
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int LANES_N = WN / TN;                        // lanes along n in a warp
    constexpr int SPAN_M = WM / (TM / 4), SPAN_N = WN / (TN / 4);   // distance between a thread's chunks
    constexpr int LDA = BM + 4, LDB = BN + 4;
    constexpr int A_LOADS = BM * BK / 4 / THREADS, B_LOADS = BN * BK / 4 / THREADS;   // float4s a thread
    static_assert(BM % WM == 0 && BN % WN == 0, "gemm_f32_warp: BM must be a multiple of WM and BN of WN");
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BK % 4 == 0, "gemm_f32_warp: TM, TN and BK must be multiples of 4");
    static_assert(WM % TM == 0 && WN % TN == 0 && (WM / TM) * (WN / TN) == 32,
                  "gemm_f32_warp: a warp's (WM / TM) x (WN / TN) threads must be its 32 lanes");
    static_assert(THREADS >= 32 && THREADS <= 1024, "gemm_f32_warp: 32 to 1024 threads a block");
    static_assert(A_LOADS >= 1 && B_LOADS >= 1 && A_LOADS * 4 * THREADS == BM * BK && B_LOADS * 4 * THREADS == BN * BK,
                  "gemm_f32_warp: each thread loads whole 4-element pieces of the A and B tiles");
    static_assert(2 * BK * (LDA + LDB) * 4 <= 48 * 1024, "gemm_f32_warp: two buffers of tiles must fit 48 KiB");
    __shared__ __align__(16) float As[2][BK][LDA];
    __shared__ __align__(16) float Bs[2][BK][LDB];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
    const int lm = (lane / LANES_N) * 4, ln = (lane % LANES_N) * 4;
    // the blocks in bands of GROUP_M tile rows, each band column by column: blocks running together
    // share their tiles of B (and of A) in L2 instead of each reading B's columns from DRAM
    const int optiml_grid_n = gridDim.x, optiml_grid_m = gridDim.y, optiml_bid = blockIdx.y * optiml_grid_n + blockIdx.x;
    const int optiml_band = optiml_bid / (OPTIML_GROUP_M * optiml_grid_n), optiml_first = optiml_band * OPTIML_GROUP_M;
    const int optiml_rows = min(optiml_grid_m - optiml_first, OPTIML_GROUP_M), optiml_in_band = optiml_bid % (OPTIML_GROUP_M * optiml_grid_n);
    const int m0 = (optiml_first + optiml_in_band % optiml_rows) * BM, n0 = (optiml_in_band / optiml_rows) * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const float* __restrict__ Ap = OPTIML_A_PTR;
    const float* __restrict__ Bp = OPTIML_B_PTR;
    const bool a_vec = ((OPTIML_A_ALONG_M ? Mx : Kx) % 4 == 0) && ((reinterpret_cast<size_t>(Ap) & 15) == 0);
    const bool b_vec = ((OPTIML_B_ALONG_K ? Kx : Nx) % 4 == 0) && ((reinterpret_cast<size_t>(Bp) & 15) == 0);
    float4 ra[A_LOADS], rb[B_LOADS];

    // the tiles at k0 into registers: piece i of A holds 4 elements along its contiguous index
    auto load = [&](int k0) {
        const bool fast_a = a_vec && m0 + BM <= Mx && k0 + BK <= Kx;
        const bool fast_b = b_vec && n0 + BN <= Nx && k0 + BK <= Kx;
#pragma unroll
        for (int l = 0; l < A_LOADS; l++) {
            const int i = tid + l * THREADS;
#if OPTIML_A_ALONG_M
            const int k = i / (BM / 4), m = (i % (BM / 4)) * 4, dm = 1, dk = 0;
#else
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4, dm = 0, dk = 1;
#endif
            if (fast_a) {
                ra[l] = *reinterpret_cast<const float4*>(&OPTIML_A(m0 + m, k0 + k));
            } else {
                float v[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int gm = m0 + m + j * dm, gk = k0 + k + j * dk;
                    v[j] = (gm < Mx && gk < Kx) ? OPTIML_A(gm, gk) : 0.0f;
                }
                ra[l] = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; l++) {
            const int i = tid + l * THREADS;
#if OPTIML_B_ALONG_K
            const int n = i / (BK / 4), k = (i % (BK / 4)) * 4, dn = 0, dk = 1;
#else
            const int k = i / (BN / 4), n = (i % (BN / 4)) * 4, dn = 1, dk = 0;
#endif
            if (fast_b) {
                rb[l] = *reinterpret_cast<const float4*>(&OPTIML_B(k0 + k, n0 + n));
            } else {
                float v[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int gn = n0 + n + j * dn, gk = k0 + k + j * dk;
                    v[j] = (gn < Nx && gk < Kx) ? OPTIML_B(gk, gn) : 0.0f;
                }
                rb[l] = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
    };
    // the registers into shared buffer s, both tiles k-major
    auto store = [&](int s) {
#pragma unroll
        for (int l = 0; l < A_LOADS; l++) {
            const int i = tid + l * THREADS;
#if OPTIML_A_ALONG_M
            const int k = i / (BM / 4), m = (i % (BM / 4)) * 4;
            *reinterpret_cast<float4*>(&As[s][k][m]) = ra[l];
#else
            const int m = i / (BK / 4), k = (i % (BK / 4)) * 4;
            As[s][k][m] = ra[l].x; As[s][k + 1][m] = ra[l].y; As[s][k + 2][m] = ra[l].z; As[s][k + 3][m] = ra[l].w;
#endif
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; l++) {
            const int i = tid + l * THREADS;
#if OPTIML_B_ALONG_K
            const int n = i / (BK / 4), k = (i % (BK / 4)) * 4;
            Bs[s][k][n] = rb[l].x; Bs[s][k + 1][n] = rb[l].y; Bs[s][k + 2][n] = rb[l].z; Bs[s][k + 3][n] = rb[l].w;
#else
            const int k = i / (BN / 4), n = (i % (BN / 4)) * 4;
            *reinterpret_cast<float4*>(&Bs[s][k][n]) = rb[l];
#endif
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    const int tiles = (Kx + BK - 1) / BK;
    if (tiles > 0) {
        load(0);
        store(0);
    }
    __syncthreads();
    for (int t = 0; t < tiles; t++) {
        const int s = t & 1;
        if (t + 1 < tiles) load((t + 1) * BK);        // in flight while this tile is multiplied
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int c = 0; c < TM / 4; c++) {
                const float4 v = *reinterpret_cast<const float4*>(&As[s][k][wm0 + c * SPAN_M + lm]);
                a[4 * c] = v.x; a[4 * c + 1] = v.y; a[4 * c + 2] = v.z; a[4 * c + 3] = v.w;
            }
#pragma unroll
            for (int c = 0; c < TN / 4; c++) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[s][k][wn0 + c * SPAN_N + ln]);
                b[4 * c] = v.x; b[4 * c + 1] = v.y; b[4 * c + 2] = v.z; b[4 * c + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] += a[i] * b[j];
        }
        if (t + 1 < tiles) store(s ^ 1);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; i++) {
        const int gm = m0 + wm0 + (i / 4) * SPAN_M + lm + i % 4;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            const int gn = n0 + wn0 + (j / 4) * SPAN_N + ln + j % 4;
            if (gm < Mx && gn < Nx) {
                const float optiml_acc = acc[i][j];
                OPTIML_C(gm, gn) = OPTIML_EPILOGUE(optiml_acc, gm, gn);
            }
        }
    }
}
