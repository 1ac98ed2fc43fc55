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
