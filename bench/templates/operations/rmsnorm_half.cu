// RMSNorm of fp16 rows with a weight (LLaMA-style), fp32 statistics: a first kernel with a block of
// 256 a row and a shared-memory tree for the sum of squares.
#include <cuda_fp16.h>
__global__ void rmsnorm_half(const __half *x, const __half *w, __half *y, int tokens, int hidden, float eps) {
    __shared__ float red[256];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = tid; i < hidden; i += blockDim.x) {
        float v = __half2float(x[(size_t)row * hidden + i]);
        acc += v * v;
    }
    red[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    float scale = rsqrtf(red[0] / hidden + eps);
    for (int i = tid; i < hidden; i += blockDim.x)
        y[(size_t)row * hidden + i] = __float2half(__half2float(x[(size_t)row * hidden + i]) * scale * __half2float(w[i]));
}
