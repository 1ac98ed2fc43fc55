// C = A x B in fp16 with fp32 accumulation (4096 x 4096 x 4096), a first kernel: one thread per
// output, 16 x 16 blocks, the dot product straight from global memory.
#include <cuda_fp16.h>
__global__ void hgemm(const __half* A, const __half* B, __half* C, int M, int N, int K) {
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; k++) sum += __half2float(A[row * K + k]) * __half2float(B[k * N + col]);
        C[row * N + col] = __float2half(sum);
    }
}
