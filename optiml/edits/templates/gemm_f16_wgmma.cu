// optiml template gemm_f16_wgmma: C = epilogue(A x B) with fp16 (or bf16) inputs on Hopper's tensor cores
// through wgmma.mma_async (sm_90a: the candidate carries -arch=sm_90a), fp32 accumulation.
//
// A block of WGS warpgroups (128 threads each) computes a BM x BN tile of C, BM = 64 * MW * WGS: each
// warpgroup MW wgmma tiles of 64 x BN, its accumulators in registers. K is walked 64 at a time through
// STAGES shared buffers: while wgmma reads tile t straight from shared memory, the wgmmas of tile t - 1
// finish and the tiles up to STAGES - 2 ahead are copied by cp.async (16 bytes). Each tile is stored in the 128-byte swizzled layout that
// wgmma's matrix descriptors name: K-major (an operand whose K index is contiguous) as rows of 64 k's,
// M- or N-major (the other layouts, read through wgmma's transpose) as 64-wide blocks of rows of one k,
// so any of A (M x K or K x M) and B (K x N or N x K) work. A 16-byte piece not wholly inside the
// matrix, or an operand whose rows are not 16-byte aligned, is loaded element by element with guards:
// any M, N, K work. Operands through macros as in gemm_f16_mma. Its launch asks for
// STAGES * (BM + BN) * 128 + 1024 bytes of dynamic shared memory (the 1024: aligning the swizzle atoms).
//
// Tuned: OPTIML_BN (128 or 256, wgmma's N), OPTIML_MW, OPTIML_WGS, OPTIML_STAGES, OPTIML_GROUP_M (the
// blocks run in bands of that many tile rows, for L2); static_asserts refuse what the body cannot run.
//
// With OPTIML_WS 1 (the gemm_f16_wgmma_tma template) the block is warp-specialised and persistent: WGS
// consumer warpgroups multiply, one more warpgroup produces. Its first thread takes tiles from a counter
// in global memory (so the blocks resident on the GPU share every tile between them, whatever its number
// of SMs, and the others find none left and end) and fills the STAGES buffers with TMA bulk copies, each
// stage's mbarrier counting the bytes in; the consumers free a stage through a second mbarrier once the
// wgmmas that read it are done, and store their tile while the producer is already loading the next.
// The tensor maps are written on the GPU (tensormap.replace into shared memory, then copied to a slot of
// global memory), since the entry has the user's signature and no host code. TMA zero-fills outside the
// matrix, so edge tiles need no guards; an operand TMA cannot take (a row stride or base address not a
// multiple of 16 bytes) is loaded piece by piece by the producer warpgroup instead. The counters reset
// themselves when the last block ends: the kernel must not run concurrently with itself.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef OPTIML_BN
#define OPTIML_BN 256
#endif
#ifndef OPTIML_MW
#define OPTIML_MW 1
#endif
#ifndef OPTIML_WGS
#define OPTIML_WGS 2
#endif
#ifndef OPTIML_STAGES
#define OPTIML_STAGES 4
#endif
#ifndef OPTIML_GROUP_M
#define OPTIML_GROUP_M 8
#endif
#ifndef OPTIML_WS
#define OPTIML_WS 0
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
#ifndef optiml_wgmma_helpers
#define optiml_wgmma_helpers
__device__ __forceinline__ void optiml_wg_cp_async16(void* dst, const void* src) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}

// a shared-memory matrix descriptor: start address, leading and stride byte offsets, 128-byte swizzle
__device__ __forceinline__ unsigned long long optiml_wg_desc(const void* p, unsigned lbo, unsigned sbo) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    return static_cast<unsigned long long>((a & 0x3FFFF) >> 4) | (static_cast<unsigned long long>((lbo & 0x3FFFF) >> 4) << 16)
           | (static_cast<unsigned long long>((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

#define optiml_wgmma_asm_n128(AB) asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
    "}, %64, %65, p, 1, 1, %67, %68;\n}\n" \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
    : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
template <int TA, int TB, int BF16>
__device__ __forceinline__ void optiml_wgmma_n128(float* d, unsigned long long da, unsigned long long db) {
    if constexpr (BF16) optiml_wgmma_asm_n128("bf16.bf16");
    else optiml_wgmma_asm_n128("f16.f16");
}

#define optiml_wgmma_asm_n256(AB) asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}, %128, %129, p, 1, 1, %131, %132;\n}\n" \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
      "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
      "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
      "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
      "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
      "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
      "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
      "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
      "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
    : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB))
template <int TA, int TB, int BF16>
__device__ __forceinline__ void optiml_wgmma_n256(float* d, unsigned long long da, unsigned long long db) {
    if constexpr (BF16) optiml_wgmma_asm_n256("bf16.bf16");
    else optiml_wgmma_asm_n256("f16.f16");
}
#endif

// the warp-specialised variant's: mbarriers, TMA and tensor maps written on the GPU
#ifndef optiml_tma_helpers
#define optiml_tma_helpers
constexpr unsigned optiml_tma_slot_count = 1024;   // tensor-map slots: blocks resident at once
// the element type a pointer points to, and two of them stored at once
template <typename P> struct optiml_deref;
template <typename E> struct optiml_deref<E*> { typedef E type; };
template <typename E> struct alignas(2 * sizeof(E)) optiml_pair { E x, y; };

__device__ unsigned optiml_tma_tiles_taken, optiml_tma_blocks_done, optiml_tma_slots_taken;
__device__ __align__(128) unsigned char optiml_tma_maps[optiml_tma_slot_count][256];

__device__ __forceinline__ unsigned optiml_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void optiml_mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(optiml_smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void optiml_mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nOPTIML_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra OPTIML_WAIT;\n}\n" ::"r"(optiml_smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void optiml_mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(optiml_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void optiml_mbar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(optiml_smem_addr(bar)), "r"(bytes) : "memory");
}
// a 2-d box of the tensor map at map into shared memory at dst, its bytes counted on bar
__device__ __forceinline__ void optiml_tma_load(void* dst, const void* map, int c0, int c1, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(optiml_smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(optiml_smem_addr(bar)) : "memory");
}
// one warp writes the tensor map of a 2-byte-element matrix (inner x outer elements, rows stride bytes
// apart; boxes of box_inner x box_outer, 128-byte swizzle, zeros outside) at smem, then copies it to gmem
__device__ __forceinline__ void optiml_tma_map(unsigned char* smem, unsigned char* gmem, const void* base, unsigned inner,
                                               unsigned outer, unsigned long long stride, unsigned box_inner,
                                               unsigned box_outer, int lane) {
    reinterpret_cast<unsigned*>(smem)[lane] = 0u;
    __syncwarp();
    if (lane == 0) {
        const unsigned m = optiml_smem_addr(smem);
        asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n" ::"r"(m), "l"(base) : "memory");
        asm volatile("tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n" ::"r"(m) : "memory");
        asm volatile("tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, %1;\n" ::"r"(m), "r"(box_inner) : "memory");
        asm volatile("tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %1;\n" ::"r"(m), "r"(box_outer) : "memory");
        asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %1;\n" ::"r"(m), "r"(inner) : "memory");
        asm volatile("tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %1;\n" ::"r"(m), "r"(outer) : "memory");
        asm volatile("tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %1;\n" ::"r"(m), "l"(stride) : "memory");
        asm volatile("tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n" ::"r"(m) : "memory");
        asm volatile("tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n" ::"r"(m) : "memory");
        asm volatile("tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 1;\n" ::"r"(m) : "memory");   // 16-bit
        asm volatile("tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n" ::"r"(m) : "memory"); // 128 B
    }
    __syncwarp();
    asm volatile("tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n"
                 ::"l"(gmem), "r"(optiml_smem_addr(smem)) : "memory");
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(gmem) : "memory");
    asm volatile("cp.async.bulk.commit_group;\ncp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
#endif
// optiml:helpers end

__global__ void __launch_bounds__(128 * (OPTIML_WGS + OPTIML_WS))
optiml_gemm_f16_wgmma(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, int M, int N, int K) {  // optiml:template-signature
    typedef OPTIML_T T;
    constexpr int BN = OPTIML_BN, MW = OPTIML_MW, WGS = OPTIML_WGS, STAGES = OPTIML_STAGES, BK = 64;
    constexpr int BM = 64 * MW * WGS, THREADS = 128 * WGS;
    constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    constexpr int A_PIECES = BM * BK / 8, B_PIECES = BN * BK / 8;         // 16-byte pieces
    constexpr int ATOM = BK * 128;                                        // an M- or N-major block of 64 columns
    constexpr int TA = OPTIML_A_ALONG_M, TB = OPTIML_B_ALONG_K ? 0 : 1;   // wgmma's transposes
    static_assert(sizeof(T) == 2, "gemm_f16_wgmma: fp16 or bf16 inputs");
    static_assert(BN == 128 || BN == 256, "gemm_f16_wgmma: BN (wgmma's N) must be 128 or 256");
    static_assert(MW * BN / 2 <= 128, "gemm_f16_wgmma: at most 128 accumulators a thread (MW * BN / 2)");
    static_assert(WGS >= 1 && WGS <= 2 && STAGES >= 2 && STAGES <= 8, "gemm_f16_wgmma: 1 or 2 warpgroups, 2 to 8 stages");
    static_assert(OPTIML_WS || STAGES >= 3, "gemm_f16_wgmma: 3 stages at least without a producer warpgroup");
    static_assert(STAGES * STAGE_BYTES + 1024 + OPTIML_WS * (1024 + WGS * 64 * 33 * 4) <= 227 * 1024,
                  "gemm_f16_wgmma: the stages must fit 227 KiB of shared memory");
    extern __shared__ __align__(16) unsigned char optiml_smem[];
    const unsigned raw = static_cast<unsigned>(__cvta_generic_to_shared(optiml_smem));
    unsigned char* const tiles_at = optiml_smem + ((1024 - (raw & 1023)) & 1023);   // the swizzle's atoms: 1024-aligned

    const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
#if OPTIML_WS
    constexpr int LOADERS = 128;             // the producer warpgroup loads what TMA cannot, in few registers
    const int lt = tid - THREADS;
#else
    constexpr int LOADERS = THREADS;
    const int lt = tid;
#endif
    constexpr int A_UNROLL = OPTIML_WS ? 1 : A_PIECES / LOADERS, B_UNROLL = OPTIML_WS ? 1 : B_PIECES / LOADERS;
    static_assert(A_PIECES % LOADERS == 0 && B_PIECES % LOADERS == 0,
                  "gemm_f16_wgmma: each thread copies whole 16-byte pieces of the A and B tiles");
    const int Mx = OPTIML_M, Nx = OPTIML_N, Kx = OPTIML_K;
    const T* __restrict__ Ap = OPTIML_A_PTR;
    const T* __restrict__ Bp = OPTIML_B_PTR;
    const bool a_vec = ((OPTIML_A_ALONG_M ? Mx : Kx) % 8 == 0) && ((reinterpret_cast<size_t>(Ap) & 15) == 0);
    const bool b_vec = ((OPTIML_B_ALONG_K ? Kx : Nx) % 8 == 0) && ((reinterpret_cast<size_t>(Bp) & 15) == 0);
    const T zero = static_cast<T>(0.0f);
    int m0 = 0, n0 = 0;                      // the tile's first row and column

    // a tile on the matrix's edges (or rows not 16-byte aligned): piece by piece, guarded, swizzled: 16-byte
    // piece c of row r at r * 128 + ((c ^ (r % 8)) * 16)
    auto load_edge_a = [&](unsigned char* a, int k0) {
#pragma unroll A_UNROLL
        for (int l = 0; l < A_PIECES / LOADERS; l++) {
            const int i = lt + l * LOADERS;
#if OPTIML_A_ALONG_M     // M-major: rows of one k, in blocks of 64 m's
            const int r = i / (BM / 8), x = (i % (BM / 8)) * 8, gm = m0 + x, gk = k0 + r, dm = 1, dk = 0;
            const bool whole = gk < Kx && gm + 8 <= Mx;
            unsigned char* dst = a + (x / 64) * ATOM + r * 128 + ((((x % 64) / 8) ^ (r % 8)) * 16);
#else                    // K-major: rows of one m
            const int r = i / 8, c = i % 8, gm = m0 + r, gk = k0 + c * 8, dm = 0, dk = 1;
            const bool whole = gm < Mx && gk + 8 <= Kx;
            unsigned char* dst = a + r * 128 + ((c ^ (r % 8)) * 16);
#endif
            if (a_vec && whole) {
                optiml_wg_cp_async16(dst, &OPTIML_A(gm, gk));
            } else {
                T* d = reinterpret_cast<T*>(dst);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    d[j] = (gm + j * dm < Mx && gk + j * dk < Kx) ? OPTIML_A(gm + j * dm, gk + j * dk) : zero;
            }
        }
    };
    auto load_edge_b = [&](unsigned char* b, int k0) {
#pragma unroll B_UNROLL
        for (int l = 0; l < B_PIECES / LOADERS; l++) {
            const int i = lt + l * LOADERS;
#if OPTIML_B_ALONG_K     // K-major: rows of one n
            const int r = i / 8, c = i % 8, gn = n0 + r, gk = k0 + c * 8, dn = 0, dk = 1;
            const bool whole = gn < Nx && gk + 8 <= Kx;
            unsigned char* dst = b + r * 128 + ((c ^ (r % 8)) * 16);
#else                    // N-major: rows of one k, in blocks of 64 n's
            const int r = i / (BN / 8), x = (i % (BN / 8)) * 8, gn = n0 + x, gk = k0 + r, dn = 1, dk = 0;
            const bool whole = gk < Kx && gn + 8 <= Nx;
            unsigned char* dst = b + (x / 64) * ATOM + r * 128 + ((((x % 64) / 8) ^ (r % 8)) * 16);
#endif
            if (b_vec && whole) {
                optiml_wg_cp_async16(dst, &OPTIML_B(gk, gn));
            } else {
                T* d = reinterpret_cast<T*>(dst);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    d[j] = (gn + j * dn < Nx && gk + j * dk < Kx) ? OPTIML_B(gk + j * dk, gn + j * dn) : zero;
            }
        }
    };
    // the matrix descriptors of stage 0 (A's at this warpgroup's first 64-row tile)
    const unsigned long long desc_a = optiml_wg_desc(tiles_at + wg * MW * (TA ? ATOM : 64 * 128), TA ? ATOM : 16, 1024);
    const unsigned long long desc_b = optiml_wg_desc(tiles_at + A_BYTES, TB ? ATOM : 16, 1024);
    // one stage's wgmmas into acc: the descriptors' start address field moves by the byte offset / 16
    auto multiply = [&](float (&acc)[MW][BN / 2], int s) {
        const unsigned stage = static_cast<unsigned>(s * STAGE_BYTES) >> 4;
        const unsigned long long da0 = desc_a + stage, db0 = desc_b + stage;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < MW; i++) {
#pragma unroll
            for (int ks = 0; ks < BK / 16; ks++) {
                const unsigned long long da = da0 + ((TA ? i * ATOM + ks * 16 * 128 : i * 64 * 128 + ks * 32) >> 4);
                const unsigned long long db = db0 + ((TB ? ks * 16 * 128 : ks * 32) >> 4);
                if constexpr (BN == 256) optiml_wgmma_n256<TA, TB, OPTIML_BF16>(acc[i], da, db);
                else optiml_wgmma_n128<TA, TB, OPTIML_BF16>(acc[i], da, db);
            }
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    };
    // each warp of a warpgroup holds 16 rows of a 64-row tile: per 8 columns, 2 rows x 2 columns a lane;
    // where C's rows are contiguous and aligned, the two columns are stored at once
    typedef typename optiml_deref<decltype(&OPTIML_C(0, 0))>::type CT;
    const bool c_pair = (sizeof(CT) == 2 || sizeof(CT) == 4) && &OPTIML_C(0, 1) - &OPTIML_C(0, 0) == 1
                        && (&OPTIML_C(1, 0) - &OPTIML_C(0, 0)) % 2 == 0
                        && (reinterpret_cast<size_t>(&OPTIML_C(0, 0)) % (2 * sizeof(CT))) == 0;
    // the outputs (gm, gn) and (gm, gn + 1) of two accumulators: one store where C allows it
    auto store_two = [&](int gm, int gn, float optiml_acc0, float optiml_acc1) {
        if (c_pair && gn + 1 < Nx) {
            optiml_pair<CT> v;
            v.x = OPTIML_EPILOGUE(optiml_acc0, gm, gn);
            v.y = OPTIML_EPILOGUE(optiml_acc1, gm, gn + 1);
            *reinterpret_cast<optiml_pair<CT>*>(&OPTIML_C(gm, gn)) = v;
        } else {
            if (gn < Nx) OPTIML_C(gm, gn) = OPTIML_EPILOGUE(optiml_acc0, gm, gn);
            if (gn + 1 < Nx) OPTIML_C(gm, gn + 1) = OPTIML_EPILOGUE(optiml_acc1, gm, gn + 1);
        }
    };
    auto store = [&](float (&acc)[MW][BN / 2]) {
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
            for (int j = 0; j < BN / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int gm = m0 + (wg * MW + i) * 64 + warp * 16 + lane / 4 + h * 8;
                    const int gn = n0 + j * 8 + (lane % 4) * 2;
                    if (gm >= Mx) continue;
                    const float optiml_acc0 = acc[i][j * 4 + h * 2], optiml_acc1 = acc[i][j * 4 + h * 2 + 1];
                    store_two(gm, gn, optiml_acc0, optiml_acc1);
                }
    };
    float acc[MW][BN / 2];

#if OPTIML_WS
    const int tiles_m = (Mx + BM - 1) / BM, tiles_n = (Nx + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int kblocks = (Kx + BK - 1) / BK;
    // tile t's origin: the tiles in bands of GROUP_M tile rows, each band column by column, so that tiles
    // taken at about the same time share their rows of A and columns of B in L2
    auto origin = [&](int t) {
        const int band = t / (OPTIML_GROUP_M * tiles_n), first = band * OPTIML_GROUP_M;
        const int rows = min(tiles_m - first, OPTIML_GROUP_M), in_band = t % (OPTIML_GROUP_M * tiles_n);
        m0 = (first + in_band % rows) * BM;
        n0 = (in_band / rows) * BN;
    };
    unsigned long long* const full = reinterpret_cast<unsigned long long*>(tiles_at + STAGES * STAGE_BYTES);
    unsigned long long* const empty = full + STAGES;
    int* const tile_of = reinterpret_cast<int*>(empty + STAGES);          // the tile a stage holds (-1: no more)
    int* const shared_word = tile_of + STAGES;                             // the producer's broadcasts
    unsigned char* const maps = tiles_at + STAGES * STAGE_BYTES + 512;     // two tensor maps, 128-aligned
    // each consumer warpgroup's staging of its results, 64 rows x 32 columns at a time (a column spare)
    float* const staged = reinterpret_cast<float*>(tiles_at + STAGES * STAGE_BYTES + 1024) + wg * 64 * 33;
    // the results through shared memory, 32 columns at a time: the fragments written as they lie, then
    // read back a row's pairs at a time, so the epilogue is one small loop (its code, an erff say, once
    // rather than unrolled over every accumulator) and the stores are coalesced
    auto store_staged = [&](float (&acc)[MW][BN / 2]) {
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
            for (int c = 0; c < BN / 32; c++) {
#pragma unroll
                for (int jj = 0; jj < 4; jj++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float* row = staged + (warp * 16 + lane / 4 + h * 8) * 33 + jj * 8 + (lane % 4) * 2;
                        row[0] = acc[i][(c * 4 + jj) * 4 + h * 2];
                        row[1] = acc[i][(c * 4 + jj) * 4 + h * 2 + 1];
                    }
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");
#pragma unroll 2
                for (int k = 0; k < 8; k++) {
                    const int p = tid % 128 + k * 128, r = p / 16, col = (p % 16) * 2;
                    const int gm = m0 + (wg * MW + i) * 64 + r, gn = n0 + c * 32 + col;
                    const float optiml_acc0 = staged[r * 33 + col], optiml_acc1 = staged[r * 33 + col + 1];
                    if (gm >= Mx) continue;
                    store_two(gm, gn, optiml_acc0, optiml_acc1);
                }
                asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");
            }
    };
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            optiml_mbar_init(&full[s], 1);
            optiml_mbar_init(&empty[s], WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (wg == WGS) {                         // the producer warpgroup
        // TMA's conditions: rows contiguous, their stride and the base 16-byte multiples
        const long long a_ld = OPTIML_A_ALONG_M ? &OPTIML_A(0, 1) - &OPTIML_A(0, 0) : &OPTIML_A(1, 0) - &OPTIML_A(0, 0);
        const long long b_ld = OPTIML_B_ALONG_K ? &OPTIML_B(0, 1) - &OPTIML_B(0, 0) : &OPTIML_B(1, 0) - &OPTIML_B(0, 0);
        const bool a_unit = (OPTIML_A_ALONG_M ? &OPTIML_A(1, 0) - &OPTIML_A(0, 0) : &OPTIML_A(0, 1) - &OPTIML_A(0, 0)) == 1;
        const bool b_unit = (OPTIML_B_ALONG_K ? &OPTIML_B(1, 0) - &OPTIML_B(0, 0) : &OPTIML_B(0, 1) - &OPTIML_B(0, 0)) == 1;
        bool a_tma = a_unit && Mx > 0 && Kx > 0 && a_ld > 0 && (a_ld * 2) % 16 == 0
                     && (reinterpret_cast<size_t>(&OPTIML_A(0, 0)) & 15) == 0;
        bool b_tma = b_unit && Nx > 0 && Kx > 0 && b_ld > 0 && (b_ld * 2) % 16 == 0
                     && (reinterpret_cast<size_t>(&OPTIML_B(0, 0)) & 15) == 0;
        unsigned char* gmaps = nullptr;
        int tile = 0;
        if (lt < 32) {
            if (lane == 0) tile = static_cast<int>(atomicAdd(&optiml_tma_tiles_taken, 1u));
            tile = __shfl_sync(0xffffffffu, tile, 0);
            unsigned slot = optiml_tma_slot_count;
            if (tile < tiles && (a_tma || b_tma)) {
                if (lane == 0) slot = atomicAdd(&optiml_tma_slots_taken, 1u);
                slot = __shfl_sync(0xffffffffu, slot, 0);
            }
            if (slot < optiml_tma_slot_count) {
                gmaps = optiml_tma_maps[slot];
                if (a_tma)
                    optiml_tma_map(maps, gmaps, &OPTIML_A(0, 0), OPTIML_A_ALONG_M ? Mx : Kx, OPTIML_A_ALONG_M ? Kx : Mx,
                                   a_ld * 2, 64, OPTIML_A_ALONG_M ? 64 : BM, lane);
                if (b_tma)
                    optiml_tma_map(maps + 128, gmaps + 128, &OPTIML_B(0, 0), OPTIML_B_ALONG_K ? Kx : Nx,
                                   OPTIML_B_ALONG_K ? Nx : Kx, b_ld * 2, 64, OPTIML_B_ALONG_K ? BN : 64, lane);
            } else {
                a_tma = b_tma = false;
            }
            if (lane == 0) shared_word[0] = tile, shared_word[1] = a_tma | (b_tma << 1);
        }
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
        tile = shared_word[0];                // warp 0's tile and choice, for the whole warpgroup
        a_tma = shared_word[1] & 1;
        b_tma = shared_word[1] & 2;
        const bool both = a_tma && b_tma;
        // with both operands by TMA one thread does all; else the warpgroup loads the others' pieces
        if (!both || lt == 0) {
            int s = 0;
            unsigned phase = 0;
            for (;;) {
                const bool has = tile < tiles;
                if (has) origin(tile);
                for (int kb = 0; kb < (has ? max(kblocks, 1) : 1); kb++) {
                    optiml_mbar_wait(&empty[s], phase ^ 1);
                    if (lt == 0) tile_of[s] = has ? tile : -1;
                    if (!has) {
                        if (lt == 0) optiml_mbar_arrive(&full[s]);
                        break;
                    }
                    unsigned char* a = tiles_at + s * STAGE_BYTES;
                    unsigned char* b = a + A_BYTES;
                    const int k0 = kb * BK;
                    if (lt == 0 && (a_tma || b_tma)) {
                        optiml_mbar_expect(&full[s], (a_tma ? A_BYTES : 0) + (b_tma ? B_BYTES : 0));
                        if (a_tma) {
#if OPTIML_A_ALONG_M
#pragma unroll
                            for (int j = 0; j < BM / 64; j++) optiml_tma_load(a + j * ATOM, gmaps, m0 + j * 64, k0, &full[s]);
#else
                            optiml_tma_load(a, gmaps, k0, m0, &full[s]);
#endif
                        }
                        if (b_tma) {
#if OPTIML_B_ALONG_K
                            optiml_tma_load(b, gmaps + 128, k0, n0, &full[s]);
#else
#pragma unroll
                            for (int j = 0; j < BN / 64; j++) optiml_tma_load(b + j * ATOM, gmaps + 128, n0 + j * 64, k0, &full[s]);
#endif
                        }
                    }
                    if (!both) {
                        if (!a_tma) load_edge_a(a, k0);
                        if (!b_tma) load_edge_b(b, k0);
                        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
                        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // seen by wgmma
                        asm volatile("bar.sync 1, 128;\n" ::: "memory");
                    }
                    if (lt == 0) optiml_mbar_arrive(&full[s]);
                    if (++s == STAGES) s = 0, phase ^= 1;
                }
                if (!has) break;
                int next = 0;
                if (lt == 0) next = static_cast<int>(atomicAdd(&optiml_tma_tiles_taken, 1u));
                if (!both) {
                    if (lt == 0) shared_word[0] = next;
                    asm volatile("bar.sync 1, 128;\n" ::: "memory");
                    next = shared_word[0];
                    asm volatile("bar.sync 1, 128;\n" ::: "memory");
                }
                tile = next;
            }
            if (lt == 0) {                   // the last block to end resets the counters for the next launch
                __threadfence();
                const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
                if (atomicAdd(&optiml_tma_blocks_done, 1u) == blocks - 1) {
                    atomicExch(&optiml_tma_tiles_taken, 0u);
                    atomicExch(&optiml_tma_slots_taken, 0u);
                    atomicExch(&optiml_tma_blocks_done, 0u);
                }
            }
        }
    } else {                                 // a consumer warpgroup
        int s = 0;
        unsigned phase = 0;
        for (;;) {
            optiml_mbar_wait(&full[s], phase);
            const int tile = tile_of[s];
            if (tile < 0) break;
            origin(tile);
#pragma unroll
            for (int i = 0; i < MW; i++)
#pragma unroll
                for (int j = 0; j < BN / 2; j++) acc[i][j] = 0.0f;
            int prev = -1;
            for (int kb = 0; kb < max(kblocks, 1); kb++) {
                if (kb > 0) optiml_mbar_wait(&full[s], phase);
                multiply(acc, s);
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");    // the stage before is read
                if (prev >= 0 && tid % 128 == 0) optiml_mbar_arrive(&empty[prev]);
                prev = s;
                if (++s == STAGES) s = 0, phase ^= 1;
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if (tid % 128 == 0) optiml_mbar_arrive(&empty[prev]);
            store_staged(acc);
        }
    }
#else
    // the blocks in bands of GROUP_M tile rows, each band column by column: neighbours in time share
    // their tiles of A and B in L2
    const int optiml_grid_n = gridDim.x, optiml_grid_m = gridDim.y, optiml_bid = blockIdx.y * optiml_grid_n + blockIdx.x;
    const int optiml_band = optiml_bid / (OPTIML_GROUP_M * optiml_grid_n), optiml_first = optiml_band * OPTIML_GROUP_M;
    const int optiml_rows = min(optiml_grid_m - optiml_first, OPTIML_GROUP_M), optiml_in_band = optiml_bid % (OPTIML_GROUP_M * optiml_grid_n);
    m0 = (optiml_first + optiml_in_band % optiml_rows) * BM;
    n0 = (optiml_in_band / optiml_rows) * BN;
    // A tile wholly inside the matrix: a thread's pieces lie a fixed step apart, in the source and in the
    // swizzled tile (a multiple of 8 rows, so the swizzle repeats): one address of each, an add a piece
#if OPTIML_A_ALONG_M     // M-major: rows of one k, in blocks of 64 m's
    constexpr int A_ROW = BM / 8;
    const int a_r = tid / A_ROW, a_x = (tid % A_ROW) * 8;
    const T* const a_src = &OPTIML_A(m0 + a_x, a_r);
    const long long a_step = &OPTIML_A(m0 + a_x, a_r + THREADS / A_ROW) - a_src, a_k = &OPTIML_A(m0 + a_x, a_r + 1) - a_src;
    const int a_dst = (a_x / 64) * ATOM + a_r * 128 + ((((a_x % 64) / 8) ^ (a_r % 8)) * 16);
#else                    // K-major: rows of one m
    constexpr int A_ROW = 8;
    const int a_r = tid / 8, a_c = tid % 8;
    const T* const a_src = &OPTIML_A(m0 + a_r, a_c * 8);
    const long long a_step = &OPTIML_A(m0 + a_r + THREADS / 8, a_c * 8) - a_src, a_k = &OPTIML_A(m0 + a_r, a_c * 8 + 1) - a_src;
    const int a_dst = a_r * 128 + ((a_c ^ (a_r % 8)) * 16);
#endif
#if OPTIML_B_ALONG_K     // K-major: rows of one n
    constexpr int B_ROW = 8;
    const int b_r = tid / 8, b_c = tid % 8;
    const T* const b_src = &OPTIML_B(b_c * 8, n0 + b_r);
    const long long b_step = &OPTIML_B(b_c * 8, n0 + b_r + THREADS / 8) - b_src, b_k = &OPTIML_B(b_c * 8 + 1, n0 + b_r) - b_src;
    const int b_dst = b_r * 128 + ((b_c ^ (b_r % 8)) * 16);
#else                    // N-major: rows of one k, in blocks of 64 n's
    constexpr int B_ROW = BN / 8;
    const int b_r = tid / B_ROW, b_x = (tid % B_ROW) * 8;
    const T* const b_src = &OPTIML_B(b_r, n0 + b_x);
    const long long b_step = &OPTIML_B(b_r + THREADS / B_ROW, n0 + b_x) - b_src, b_k = &OPTIML_B(b_r + 1, n0 + b_x) - b_src;
    const int b_dst = (b_x / 64) * ATOM + b_r * 128 + ((((b_x % 64) / 8) ^ (b_r % 8)) * 16);
#endif
    static_assert(THREADS % A_ROW == 0 && (THREADS / A_ROW) % 8 == 0 && THREADS % B_ROW == 0 && (THREADS / B_ROW) % 8 == 0,
                  "gemm_f16_wgmma: a thread's pieces must lie a multiple of 8 rows apart (BN 256 wants 2 warpgroups)");
    auto load = [&](int s, int k0) {
        unsigned char* a = tiles_at + s * STAGE_BYTES;
        unsigned char* b = a + A_BYTES;
        if (a_vec && m0 + BM <= Mx && k0 + BK <= Kx) {
            const T* src = a_src + k0 * a_k;
#pragma unroll
            for (int l = 0; l < A_PIECES / THREADS; l++)
                optiml_wg_cp_async16(a + a_dst + l * (THREADS / A_ROW) * 128, src + l * a_step);
        } else {
            load_edge_a(a, k0);
        }
        if (b_vec && n0 + BN <= Nx && k0 + BK <= Kx) {
            const T* src = b_src + k0 * b_k;
#pragma unroll
            for (int l = 0; l < B_PIECES / THREADS; l++)
                optiml_wg_cp_async16(b + b_dst + l * (THREADS / B_ROW) * 128, src + l * b_step);
        } else {
            load_edge_b(b, k0);
        }
    };
#pragma unroll
    for (int i = 0; i < MW; i++)
#pragma unroll
        for (int j = 0; j < BN / 2; j++) acc[i][j] = 0.0f;
    // tile t is multiplied while tile t - 1's wgmmas drain and tiles t + 1 .. t + STAGES - 2 are copied
    const int tiles = (Kx + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < tiles) load(s, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int t = 0; t < tiles; t++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 3));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // this thread's writes, seen by wgmma
        __syncthreads();           // tile t is in; every warpgroup is done with tile t - 2: its stage is free
        if (t + STAGES - 2 < tiles) load((t + STAGES - 2) % STAGES, (t + STAGES - 2) * BK);
        asm volatile("cp.async.commit_group;\n" ::);
        multiply(acc, t % STAGES);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");    // tile t - 1's are done
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\n" ::);
    store(acc);
#endif
}
