// 4_Matrix_vector_multiplication_: C (M x 1) = A (M x K) B (K x 1); a block per row, shared tree.
#define BLOCK 256
__global__ void gemv_kernel(const float* A, const float* B, float* C, int M, int K) {
    __shared__ float partial[BLOCK];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int k = tid; k < K; k += BLOCK) sum += A[(size_t)row * K + k] * B[k];
    partial[tid] = sum;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) C[row] = partial[0];
}
