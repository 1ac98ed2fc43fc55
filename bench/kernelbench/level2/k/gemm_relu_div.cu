// 63_Gemm_ReLU_Divide, style B: a thread an output, the divisor an argument.
__global__ void gemm_relu_div(const float* A, const float* B, const float* bias, float* C, int M, int N, int K, float divisor) {
    int m = blockIdx.y * blockDim.y + threadIdx.y;
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (m < M && n < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[m * K + k] * B[n * K + k];
        C[m * N + n] = fmaxf(acc + bias[n], 0.0f) / divisor;
    }
}
