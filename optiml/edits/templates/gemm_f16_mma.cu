// optiml template gemm_f16_mma: C = epilogue(A x B) with fp16 (or bf16) inputs on the tensor cores
// through mma.sync m16n8k16 (fp32 accumulation), operands from shared memory by ldmatrix, a multistage
// cp.async pipeline (sm_80 and later).
//
// A block of WARPS_M x WARPS_N warps computes a BM x BN tile of C, each warp a (BM / WARPS_M) x
// (BN / WARPS_N) part as 16 x 8 accumulator tiles. K is walked BK at a time through STAGES shared
// buffers: the tiles STAGES - 1 ahead are copied by cp.async (16 bytes, bypassing the registers) while
// the current one is multiplied. Each tile keeps its operand's own layout (rows padded by 8 elements,
// so ldmatrix reads without bank conflicts) and ldmatrix transposes where the layout asks for it, so
// any of A (M x K or K x M) and B (K x N or N x K) work. A 16-byte piece that is not wholly inside the
// matrix, or an operand whose rows are not 16-byte aligned, is loaded element by element with guards:
// any M, N, K work. Operands through macros as in gemm_f16_wmma, plus OPTIML_A_PTR / OPTIML_B_PTR,
// OPTIML_A_ALONG_M / OPTIML_B_ALONG_K and OPTIML_BF16 (1: bf16 inputs). Its launch asks for
// STAGES * ((BM + 8) + (BN + 8)) * (BK + 8) * 2 bytes of dynamic shared memory.
//
// Tuned: OPTIML_BM, OPTIML_BN, OPTIML_BK, OPTIML_WARPS_M, OPTIML_WARPS_N, OPTIML_STAGES; static_asserts
// refuse what the body cannot run.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef OPTIML_BM
#define OPTIML_BM 128
#endif
#ifndef OPTIML_BN
#define OPTIML_BN 128
#endif
#ifndef OPTIML_BK
#define OPTIML_BK 32
#endif
#ifndef OPTIML_WARPS_M
#define OPTIML_WARPS_M 2
#endif
#ifndef OPTIML_WARPS_N
#define OPTIML_WARPS_N 2
#endif
#ifndef OPTIML_STAGES
#define OPTIML_STAGES 3
#endif
#ifndef OPTIML_A
#define OPTIML_T __half
#define OPTIML_BF16 0
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
#define OPTIML_EPILOGUE(acc, m, n) __float2half(acc)
#endif

// optiml:helpers begin (carried into the instantiation; the guard lets several live in one file)
#ifndef optiml_mma_helpers
#define optiml_mma_helpers
__device__ __forceinline__ void optiml_cp_async16(void* dst, const void* src) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}

__device__ __forceinline__ void optiml_ldmatrix_x4(unsigned* r, const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void optiml_ldmatrix_x4_trans(unsigned* r, const void* p) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

template <int BF16>
__device__ __forceinline__ void optiml_mma16816(float* d, const unsigned* a, const unsigned* b) {
    if constexpr (BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                     "{%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
// optiml:helpers end

__global__ void __launch_bounds__(32 * OPTIML_WARPS_M * OPTIML_WARPS_N)
optiml_gemm_f16_mma(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    typedef OPTIML_T T;
    constexpr int BM = OPTIML_BM, BN = OPTIML_BN, BK = OPTIML_BK, STAGES = OPTIML_STAGES;
    constexpr int WARPS_M = OPTIML_WARPS_M, WARPS_N = OPTIML_WARPS_N, THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
#if OPTIML_A_ALONG_M
    constexpr int A_ROWS = BK, A_LD = BM + 8;      // k-major: row k holds BM m's
#else
    constexpr int A_ROWS = BM, A_LD = BK + 8;      // m-major: row m holds BK k's
#endif
#if OPTIML_B_ALONG_K
    constexpr int B_ROWS = BN, B_LD = BK + 8;      // n-major: row n holds BK k's
#else
    constexpr int B_ROWS = BK, B_LD = BN + 8;      // k-major: row k holds BN n's
#endif
    constexpr int A_STAGE = (BM + 8) * (BK + 8), B_STAGE = (BN + 8) * (BK + 8);   // elements, as the launch asks
    constexpr int A_PIECES = A_ROWS * (A_LD - 8) / 8, B_PIECES = B_ROWS * (B_LD - 8) / 8;   // 16-byte pieces
    static_assert(sizeof(T) == 2, "gemm_f16_mma: fp16 or bf16 inputs");
    static_assert(BK % 16 == 0 && BM % WARPS_M == 0 && BN % WARPS_N == 0 && WM % 16 == 0 && WN % 16 == 0,
                  "gemm_f16_mma: BK and each warp's WM x WN must be multiples of 16");
    static_assert(STAGES >= 2 && STAGES <= 8, "gemm_f16_mma: 2 to 8 stages");
    static_assert(A_PIECES % THREADS == 0 && B_PIECES % THREADS == 0,
                  "gemm_f16_mma: each thread copies whole 16-byte pieces of the A and B tiles");
    static_assert(MI * NI * 4 <= 128, "gemm_f16_mma: at most 128 accumulators a thread");
    extern __shared__ __align__(16) unsigned char optiml_smem[];
    T* const sA = reinterpret_cast<T*>(optiml_smem);
    T* const sB = sA + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const T* __restrict__ Ap = OPTIML_A_PTR;
    const T* __restrict__ Bp = OPTIML_B_PTR;
    const bool a_vec = ((OPTIML_A_ALONG_M ? Mx : Kx) % 8 == 0) && ((reinterpret_cast<size_t>(Ap) & 15) == 0);
    const bool b_vec = ((OPTIML_B_ALONG_K ? Kx : Nx) % 8 == 0) && ((reinterpret_cast<size_t>(Bp) & 15) == 0);
    const T zero = static_cast<T>(0.0f);

    // the tiles at k0 into stage s: whole 16-byte pieces by cp.async, the rest element by element
    auto load = [&](int s, int k0) {
        T* a = sA + s * A_STAGE;
        T* b = sB + s * B_STAGE;
#pragma unroll
        for (int l = 0; l < A_PIECES / THREADS; l++) {
            const int i = tid + l * THREADS, r = i / ((A_LD - 8) / 8), c = (i % ((A_LD - 8) / 8)) * 8;
#if OPTIML_A_ALONG_M
            const int gk = k0 + r, gm = m0 + c, dm = 1, dk = 0;
            const bool whole = gk < Kx && gm + 8 <= Mx;
#else
            const int gm = m0 + r, gk = k0 + c, dm = 0, dk = 1;
            const bool whole = gm < Mx && gk + 8 <= Kx;
#endif
            T* dst = a + r * A_LD + c;
            if (a_vec && whole) {
                optiml_cp_async16(dst, &OPTIML_A(gm, gk));
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    dst[j] = (gm + j * dm < Mx && gk + j * dk < Kx) ? OPTIML_A(gm + j * dm, gk + j * dk) : zero;
            }
        }
#pragma unroll
        for (int l = 0; l < B_PIECES / THREADS; l++) {
            const int i = tid + l * THREADS, r = i / ((B_LD - 8) / 8), c = (i % ((B_LD - 8) / 8)) * 8;
#if OPTIML_B_ALONG_K
            const int gn = n0 + r, gk = k0 + c, dn = 0, dk = 1;
            const bool whole = gn < Nx && gk + 8 <= Kx;
#else
            const int gk = k0 + r, gn = n0 + c, dn = 1, dk = 0;
            const bool whole = gk < Kx && gn + 8 <= Nx;
#endif
            T* dst = b + r * B_LD + c;
            if (b_vec && whole) {
                optiml_cp_async16(dst, &OPTIML_B(gk, gn));
            } else {
#pragma unroll
                for (int j = 0; j < 8; j++)
                    dst[j] = (gn + j * dn < Nx && gk + j * dk < Kx) ? OPTIML_B(gk + j * dk, gn + j * dn) : zero;
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

    const int tiles = (Kx + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < tiles) load(s, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    const int lr = lane % 8, lq = lane / 8;        // ldmatrix: the row this lane addresses, and its matrix
    for (int t = 0; t < tiles; t++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();                           // tile t is in; stage (t - 1) % STAGES is free
        if (t + STAGES - 1 < tiles) load((t + STAGES - 1) % STAGES, (t + STAGES - 1) * BK);
        asm volatile("cp.async.commit_group;\n" ::);
        const T* a = sA + (t % STAGES) * A_STAGE;
        const T* b = sB + (t % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; i++) {
#if OPTIML_A_ALONG_M   // matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15), stored by k: transpose
                optiml_ldmatrix_x4_trans(af[i], a + (kk + lr + (lq / 2) * 8) * A_LD + wm0 + i * 16 + (lq % 2) * 8);
#else
                optiml_ldmatrix_x4(af[i], a + (wm0 + i * 16 + lr + (lq % 2) * 8) * A_LD + kk + (lq / 2) * 8);
#endif
            }
#pragma unroll
            for (int j = 0; j < NI; j += 2) {          // two n8 tiles a load
                unsigned r[4];
#if OPTIML_B_ALONG_K   // matrices (n0-7,k0-7) (n0-7,k8-15) (n8-15,k0-7) (n8-15,k8-15), stored by n
                optiml_ldmatrix_x4(r, b + (wn0 + j * 8 + lr + (lq / 2) * 8) * B_LD + kk + (lq % 2) * 8);
#else                  // the same matrices stored by k: transpose
                optiml_ldmatrix_x4_trans(r, b + (kk + lr + (lq % 2) * 8) * B_LD + wn0 + j * 8 + (lq / 2) * 8);
#endif
                bf[j][0] = r[0]; bf[j][1] = r[1]; bf[j + 1][0] = r[2]; bf[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) optiml_mma16816<OPTIML_BF16>(acc[i][j], af[i], bf[j]);
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NI; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int gm = m0 + wm0 + i * 16 + lane / 4 + (q / 2) * 8;
                const int gn = n0 + wn0 + j * 8 + (lane % 4) * 2 + q % 2;
                if (gm < Mx && gn < Nx) {
                    const float optiml_acc = acc[i][j][q];
                    OPTIML_C(gm, gn) = OPTIML_EPILOGUE(optiml_acc, gm, gn);
                }
            }
}
