// y = GELU(x W^T + b) in fp16 with fp32 accumulation (an MLP's up-projection: 4096 tokens, 4096 in,
// 8192 out; W as nn.Linear stores it, N x K), a first kernel: one thread per output, 16 x 16 blocks,
// the dot product straight from global memory, the exact (erf) GELU.
#include <cuda_fp16.h>
__global__ void linear_gelu(const __half* x, const __half* w, const __half* b, __half* y, int M, int N, int K) {
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float v = 0.0f;
        for (int k = 0; k < K; k++) v += __half2float(x[row * K + k]) * __half2float(w[col * K + k]);
        v += __half2float(b[col]);
        y[row * N + col] = __float2half(0.5f * v * (1.0f + erff(v * 0.70710678f)));
    }
}
