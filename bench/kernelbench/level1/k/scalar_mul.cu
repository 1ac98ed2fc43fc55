// 5_Matrix_scalar_multiplication: C = A * s, 2-D grid.
__global__ void scalar_mul_kernel(const float* A, float s, float* C, int M, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        C[row * N + col] = A[row * N + col] * s;
    }
}
