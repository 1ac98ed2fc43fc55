// 86_Matmul_Divide_GELU, style B: a 16 x 16 shared-memory tiled GEMM, GELU written out in the store.
#define TILE 16
__global__ void matmul_div_gelu_tiled(const float* A, const float* W, const float* b, float* C, int M, int K, int N) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ka = t * TILE + threadIdx.x, kb = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < N && kb < K) ? W[col * K + kb] : 0.0f;   // W^T, K x N
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N)
        C[row * N + col] = 0.5f * ((acc + b[col]) / 10.0f) * (1.0f + erff((acc + b[col]) / 10.0f * 0.70710678118654752f));
}
