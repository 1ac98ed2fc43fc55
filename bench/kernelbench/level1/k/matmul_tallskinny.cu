// 9_Tall_skinny_matrix_multiplication_: A is M x N (N = 32), B is N x M, C = A B is M x M.
__global__ void tall_skinny_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < M) {
        float sum = 0.0f;
        #pragma unroll 8
        for (int k = 0; k < N; ++k) sum += A[row * N + k] * B[k * M + col];
        C[(size_t)row * M + col] = sum;
    }
}
