// 18_Matmul_with_transposed_both: C = A^T B^T with A K x M and B N x K, C is M x N.
__global__ void matmul_tt_kernel(const float* A, const float* B, float* C, int M, int K, int N) {
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (m < M && n < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) sum += A[k * M + m] * B[n * K + k];
        C[m * N + n] = sum;
    }
}
