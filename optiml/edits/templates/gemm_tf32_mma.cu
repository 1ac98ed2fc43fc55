// optiml template gemm_tf32_mma: C = epilogue(A x B) with fp32 inputs on the tensor cores in TF32
// (10-bit mantissas, rounded to nearest by cvt.rna; fp32 accumulation) through mma.sync m16n8k8,
// a multistage cp.async pipeline (sm_80 and later). Offered only when the user opts in (--tf32): its
// results differ from fp32 by about 1e-3 relative, and verification against the task's tolerance decides.
//
// A block of WARPS_M x WARPS_N warps computes a BM x BN tile of C, each warp a (BM / WARPS_M) x
// (BN / WARPS_N) part as 16 x 8 accumulator tiles. K is walked BK at a time through STAGES shared
// buffers, the tiles STAGES - 1 ahead copied by cp.async (16 bytes) while the current one is
// multiplied. Each tile keeps its operand's own layout; rows are padded (4 floats where the fragment
// reads go along a row, 8 where they go down a column) so the fragment loads, one float each, hit 32
// different banks. A 16-byte piece not wholly inside the matrix, or an operand whose rows are not
// 16-byte aligned, is loaded element by element with guards: any M, N, K work. Operands through macros
// as in gemm_f16_mma. Its launch asks for STAGES * ((BM + 8) + (BN + 8)) * (BK + 8) * 4 bytes of
// dynamic shared memory.
//
// With OPTIML_TF32_SPLIT 1 (the gemm_f32_3xtf32 template) each operand is split into a TF32 part and
// the TF32 rounding of what that part leaves (x = big + small to about 22 of fp32's 24 bits), and each
// product is summed as small x big + big x small + big x big, the three mma.sync in that order. Each
// 8-deep step is summed by the tensor cores from zero and added to the accumulators by the SIMT cores,
// rounded to nearest: the tensor cores' own additions truncate, which summed over all of K costs more
// than the split gains (15x fp32's error at K = 8192, measured on an H100). So made, the result is
// as accurate as fp32 on the SIMT cores (measured: 0.37x cuBLAS fp32's largest error against fp64 at
// 1024 x 8192 x 8192), at three tensor-core operations a product; no opt-in needed. An infinite
// operand gives NaN (inf - inf in the split) where fp32 gives inf.
//
// Tuned: OPTIML_BM, OPTIML_BN, OPTIML_BK, OPTIML_WARPS_M, OPTIML_WARPS_N, OPTIML_STAGES; static_asserts
// refuse what the body cannot run.
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
#ifndef OPTIML_TF32_SPLIT
#define OPTIML_TF32_SPLIT 0
#endif
#ifndef OPTIML_A
#define OPTIML_T float
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

// optiml:helpers begin (carried into the instantiation; the guard lets several live in one file)
#ifndef optiml_tf32_helpers
#define optiml_tf32_helpers
__device__ __forceinline__ void optiml_cp_async16_f32(void* dst, const void* src) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}

__device__ __forceinline__ unsigned optiml_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// x as big + small, both TF32: big rounded to nearest, small the rounding of the exact rest x - big
__device__ __forceinline__ void optiml_tf32_split(float x, unsigned& big, unsigned& small) {
    big = optiml_tf32(x);
    small = optiml_tf32(x - __uint_as_float(big));
}

__device__ __forceinline__ void optiml_mma1688(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
// optiml:helpers end

__global__ void __launch_bounds__(32 * OPTIML_WARPS_M * OPTIML_WARPS_N)
optiml_gemm_tf32_mma(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    typedef OPTIML_T T;
    constexpr int BM = OPTIML_BM, BN = OPTIML_BN, BK = OPTIML_BK, STAGES = OPTIML_STAGES;
    constexpr int WARPS_M = OPTIML_WARPS_M, WARPS_N = OPTIML_WARPS_N, THREADS = 32 * WARPS_M * WARPS_N;
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
#if OPTIML_A_ALONG_M
    constexpr int A_ROWS = BK, A_W = BM, A_LD = BM + 8;      // k-major: row k holds BM m's (fragments read down it)
#else
    constexpr int A_ROWS = BM, A_W = BK, A_LD = BK + 4;      // m-major: row m holds BK k's
#endif
#if OPTIML_B_ALONG_K
    constexpr int B_ROWS = BN, B_W = BK, B_LD = BK + 4;      // n-major: row n holds BK k's
#else
    constexpr int B_ROWS = BK, B_W = BN, B_LD = BN + 8;      // k-major: row k holds BN n's
#endif
    constexpr int A_STAGE = (BM + 8) * (BK + 8), B_STAGE = (BN + 8) * (BK + 8);   // elements, as the launch asks
    constexpr int A_PIECES = A_ROWS * A_W / 4, B_PIECES = B_ROWS * B_W / 4;       // 16-byte pieces
    static_assert(sizeof(T) == 4, "gemm_tf32_mma: fp32 inputs");
    static_assert(BK % 8 == 0 && BM % WARPS_M == 0 && BN % WARPS_N == 0 && WM % 16 == 0 && WN % 8 == 0,
                  "gemm_tf32_mma: BK a multiple of 8, each warp's WM a multiple of 16 and WN of 8");
    static_assert(STAGES >= 2 && STAGES <= 8, "gemm_tf32_mma: 2 to 8 stages");
    static_assert(A_PIECES % THREADS == 0 && B_PIECES % THREADS == 0,
                  "gemm_tf32_mma: each thread copies whole 16-byte pieces of the A and B tiles");
    static_assert(MI * NI * 4 <= 128, "gemm_tf32_mma: at most 128 accumulators a thread");
    extern __shared__ __align__(16) unsigned char optiml_smem[];
    T* const sA = reinterpret_cast<T*>(optiml_smem);
    T* const sB = sA + STAGES * A_STAGE;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const T* __restrict__ Ap = OPTIML_A_PTR;
    const T* __restrict__ Bp = OPTIML_B_PTR;
    const bool a_vec = ((OPTIML_A_ALONG_M ? Mx : Kx) % 4 == 0) && ((reinterpret_cast<size_t>(Ap) & 15) == 0);
    const bool b_vec = ((OPTIML_B_ALONG_K ? Kx : Nx) % 4 == 0) && ((reinterpret_cast<size_t>(Bp) & 15) == 0);
    const T zero = 0.0f;

    // the tiles at k0 into stage s: whole 16-byte pieces by cp.async, the rest element by element
    auto load = [&](int s, int k0) {
        T* a = sA + s * A_STAGE;
        T* b = sB + s * B_STAGE;
#pragma unroll
        for (int l = 0; l < A_PIECES / THREADS; l++) {
            const int i = tid + l * THREADS, r = i / (A_W / 4), c = (i % (A_W / 4)) * 4;
#if OPTIML_A_ALONG_M
            const int gk = k0 + r, gm = m0 + c, dm = 1, dk = 0;
            const bool whole = gk < Kx && gm + 4 <= Mx;
#else
            const int gm = m0 + r, gk = k0 + c, dm = 0, dk = 1;
            const bool whole = gm < Mx && gk + 4 <= Kx;
#endif
            T* dst = a + r * A_LD + c;
            if (a_vec && whole) {
                optiml_cp_async16_f32(dst, &OPTIML_A(gm, gk));
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    dst[j] = (gm + j * dm < Mx && gk + j * dk < Kx) ? OPTIML_A(gm + j * dm, gk + j * dk) : zero;
            }
        }
#pragma unroll
        for (int l = 0; l < B_PIECES / THREADS; l++) {
            const int i = tid + l * THREADS, r = i / (B_W / 4), c = (i % (B_W / 4)) * 4;
#if OPTIML_B_ALONG_K
            const int gn = n0 + r, gk = k0 + c, dn = 0, dk = 1;
            const bool whole = gn < Nx && gk + 4 <= Kx;
#else
            const int gk = k0 + r, gn = n0 + c, dn = 1, dk = 0;
            const bool whole = gk < Kx && gn + 4 <= Nx;
#endif
            T* dst = b + r * B_LD + c;
            if (b_vec && whole) {
                optiml_cp_async16_f32(dst, &OPTIML_B(gk, gn));
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
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
    const int g = lane / 4, q4 = lane % 4;          // mma's fragments: group and thread in the group
    for (int t = 0; t < tiles; t++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();                           // tile t is in; stage (t - 1) % STAGES is free
        if (t + STAGES - 1 < tiles) load((t + STAGES - 1) % STAGES, (t + STAGES - 1) * BK);
        asm volatile("cp.async.commit_group;\n" ::);
        const T* a = sA + (t % STAGES) * A_STAGE;
        const T* b = sB + (t % STAGES) * B_STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 8) {
            unsigned af[MI][4], bf[NI][2];
#if OPTIML_TF32_SPLIT
            unsigned as[MI][4], bs[NI][2];           // what the TF32 parts leave, in TF32
#define OPTIML_FRAG(dst, rest, x) optiml_tf32_split((x), (dst), (rest))
#else
#define OPTIML_FRAG(dst, rest, x) ((dst) = optiml_tf32(x))
#endif
#pragma unroll
            for (int i = 0; i < MI; i++) {
                const int m = wm0 + i * 16 + g;     // a0 (m, k) a1 (m + 8, k) a2 (m, k + 4) a3 (m + 8, k + 4)
#if OPTIML_A_ALONG_M
#define OPTIML_SA(mm, k) a[(k) * A_LD + (mm)]
#else
#define OPTIML_SA(mm, k) a[(mm) * A_LD + (k)]
#endif
                OPTIML_FRAG(af[i][0], as[i][0], OPTIML_SA(m, kk + q4));
                OPTIML_FRAG(af[i][1], as[i][1], OPTIML_SA(m + 8, kk + q4));
                OPTIML_FRAG(af[i][2], as[i][2], OPTIML_SA(m, kk + q4 + 4));
                OPTIML_FRAG(af[i][3], as[i][3], OPTIML_SA(m + 8, kk + q4 + 4));
#undef OPTIML_SA
            }
#pragma unroll
            for (int j = 0; j < NI; j++) {
                const int n = wn0 + j * 8 + g;      // b0 (k, n) b1 (k + 4, n)
#if OPTIML_B_ALONG_K
                OPTIML_FRAG(bf[j][0], bs[j][0], b[n * B_LD + kk + q4]);
                OPTIML_FRAG(bf[j][1], bs[j][1], b[n * B_LD + kk + q4 + 4]);
#else
                OPTIML_FRAG(bf[j][0], bs[j][0], b[(kk + q4) * B_LD + n]);
                OPTIML_FRAG(bf[j][1], bs[j][1], b[(kk + q4 + 4) * B_LD + n]);
#endif
            }
#undef OPTIML_FRAG
#pragma unroll
            for (int i = 0; i < MI; i++)
#pragma unroll
                for (int j = 0; j < NI; j++) {
#if OPTIML_TF32_SPLIT
                    // the tensor cores add with truncation: summed over all of K that loses bits steadily
                    // (measured 15x fp32's error at K = 8192), so each 8-deep step sums into zeros and is
                    // added to the accumulators here, rounded to nearest
                    float step[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    optiml_mma1688(step, as[i], bf[j]);          // the small terms first
                    optiml_mma1688(step, af[i], bs[j]);
                    optiml_mma1688(step, af[i], bf[j]);
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[i][j][q] += step[q];
#else
                    optiml_mma1688(acc[i][j], af[i], bf[j]);
#endif
                }
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
