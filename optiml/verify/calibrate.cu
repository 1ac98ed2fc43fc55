// optiml calibrate's microbenchmarks (optiml/verify/calibrate.py times them; calibrate_child.py
// runs them in a GPU child). Each writes to `sink` only under a condition the compiler cannot
// decide (the caller passes a value no result takes), so no loop is optimised away.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

// DRAM copy: n float4 from src to dst, grid-stride. Bytes moved: 2 * 16 * n.
extern "C" __global__ void copy_f4(const float4* __restrict__ src, float4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}

// L2 read bandwidth: every block reads the whole buffer of n float4 (small enough for L2) `passes`
// times through L2 only (ld.global.cg skips L1). Bytes read: 16 * n * passes * gridDim.x.
extern "C" __global__ void l2_read(const float4* __restrict__ buf, unsigned long long n, int passes,
                                   float never, float* sink) {
    float acc = 0.f;
    for (int p = 0; p < passes; ++p) {
        // start each block at its own place so the blocks spread over the L2 slices
        unsigned long long start = ((unsigned long long)blockIdx.x * 977 + p * 131) % n;
        for (unsigned long long i = threadIdx.x; i < n; i += blockDim.x) {
            unsigned long long j = i + start;
            if (j >= n) j -= n;
            float4 v = __ldcg(buf + j);
            acc += v.x + v.y + v.z + v.w;
        }
    }
    if (acc == never) sink[0] = acc;
}

// FP32 FMA: each thread runs 8 independent chains of `iters` * 16 FMAs. FLOPs: 2 * 8 * 16 * iters
// per thread.
extern "C" __global__ void fma_f32(int iters, float a, float b, float never, float* sink) {
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = threadIdx.x * 0.001f + k;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < 16; ++u) {
#pragma unroll
            for (int k = 0; k < 8; ++k) x[k] = fmaf(x[k], a, b);
        }
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) s += x[k];
    if (s == never) sink[0] = s;
}

// Tensor cores through mma.sync (sm_80 and later; an empty kernel before): each warp runs 4
// independent accumulators through `iters` * 8 mma each. FLOPs per mma: 2*16*8*16 (fp16, bf16,
// m16n8k16) and 2*16*8*8 (tf32, m16n8k8). On sm_90 wgmma reaches more than mma.sync: this is the
// rate a kernel without wgmma can reach.
#define MMA_LOOP(ASM, NA)                                                                        \
    float d[4][4];                                                                               \
    _Pragma("unroll") for (int c = 0; c < 4; ++c) _Pragma("unroll") for (int k = 0; k < 4; ++k)  \
        d[c][k] = 0.f;                                                                           \
    for (int i = 0; i < iters; ++i) {                                                            \
        _Pragma("unroll") for (int u = 0; u < 8; ++u) {                                          \
            _Pragma("unroll") for (int c = 0; c < 4; ++c) {                                      \
                asm volatile(ASM                                                                 \
                             : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])        \
                             : NA);                                                              \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    float s = 0.f;                                                                               \
    _Pragma("unroll") for (int c = 0; c < 4; ++c) _Pragma("unroll") for (int k = 0; k < 4; ++k)  \
        s += d[c][k];                                                                            \
    if (s == never) sink[0] = s;

#define AB16 "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1)
#define AB8 "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1)

extern "C" __global__ void mma_f16(int iters, uint32_t seed, float never, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    a0 &= 0x3bff3bffu; a1 &= 0x3bff3bffu; a2 &= 0x3bff3bffu; a3 &= 0x3bff3bffu; b0 &= 0x3bff3bffu; b1 &= 0x3bff3bffu;
    MMA_LOOP("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
             "{%0,%1,%2,%3};\n", AB16)
#endif
}

extern "C" __global__ void mma_bf16(int iters, uint32_t seed, float never, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    a0 &= 0x3f7f3f7fu; a1 &= 0x3f7f3f7fu; a2 &= 0x3f7f3f7fu; a3 &= 0x3f7f3f7fu; b0 &= 0x3f7f3f7fu; b1 &= 0x3f7f3f7fu;
    MMA_LOOP("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
             "{%0,%1,%2,%3};\n", AB16)
#endif
}

extern "C" __global__ void mma_tf32(int iters, uint32_t seed, float never, float* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t a0 = seed ^ threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u, b0 = a0 * 11u, b1 = a0 * 13u;
    a0 &= 0x3f7fe000u; a1 &= 0x3f7fe000u; a2 &= 0x3f7fe000u; a3 &= 0x3f7fe000u; b0 &= 0x3f7fe000u; b1 &= 0x3f7fe000u;
    MMA_LOOP("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
             "{%0,%1,%2,%3};\n", AB8)
#endif
}

// Whether the mma kernels hold tensor-core code (sm_80 and later): writes 1 or 0.
extern "C" __global__ void has_mma(int* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    out[0] = 1;
#else
    out[0] = 0;
#endif
}

// Hopper's warpgroup MMA (in sm_90a builds only), the dense tensor-core peak that mma.sync does not reach
// there: two warpgroups a block, each 4 wgmma.m64n256k16 an iteration (64 of k) from 128-byte-swizzled
// shared memory filled with small values, fp32 accumulators in registers, one group left in flight.
// FLOPs: 2 * 64 * 256 * 16 * 4 * iters a warpgroup.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_N256(AB) asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                      \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"       \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) : "l"(da), "l"(db))
__device__ __forceinline__ unsigned long long wg_desc(const void* p) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    return static_cast<unsigned long long>((a & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
template <int BF16>
__device__ __forceinline__ void wgmma_loop(int iters, uint32_t seed, float never, float* sink) {
    __shared__ __align__(1024) unsigned short tiles[(64 + 256) * 64];
    for (int i = threadIdx.x; i < (64 + 256) * 64; i += blockDim.x) {
        const float v = (static_cast<float>(((seed ^ i) * 2654435761u) >> 22) - 512.f) * 1e-4f;
        tiles[i] = BF16 ? __bfloat16_as_ushort(__float2bfloat16(v)) : __half_as_ushort(__float2half(v));
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    const unsigned long long a0 = wg_desc(tiles), b0 = wg_desc(tiles + 64 * 64);
    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const unsigned long long da = a0 + 2 * ks, db = b0 + 2 * ks;    // 32 bytes of k a step
            if (BF16) WGMMA_N256("bf16.bf16");
            else WGMMA_N256("f16.f16");
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i) s += d[i];
    if (s == never) sink[0] = s;
}
#endif

extern "C" __global__ void __launch_bounds__(256, 1) wgmma_f16(int iters, uint32_t seed, float never, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    wgmma_loop<0>(iters, seed, never, sink);
#endif
}

extern "C" __global__ void __launch_bounds__(256, 1) wgmma_bf16(int iters, uint32_t seed, float never, float* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    wgmma_loop<1>(iters, seed, never, sink);
#endif
}

// Whether the wgmma kernels hold code (an sm_90a build): writes 1 or 0.
extern "C" __global__ void has_wgmma(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    out[0] = 1;
#else
    out[0] = 0;
#endif
}
