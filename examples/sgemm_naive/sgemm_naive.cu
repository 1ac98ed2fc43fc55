// Naive single-precision matrix multiply: C = A * B, one output element per thread.
// A is M x K, B is K x N, C is M x N, all row-major.
// BLOCK is the side of the square thread block; optiml may tune it.
#define BLOCK 16

__global__ void sgemm_naive(const float* A, const float* B, float* C, int M, int N, int K) {
    int row = blockIdx.y * BLOCK + threadIdx.y;
    int col = blockIdx.x * BLOCK + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}
