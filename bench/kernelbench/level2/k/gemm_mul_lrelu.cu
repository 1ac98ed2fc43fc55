// 12_Gemm_Multiply_LeakyReLU, style A: a thread an output, the epilogue inline in the store.
__global__ void gemm_mul_lrelu(const float* x, const float* w, const float* b, float* y, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += x[row * K + k] * w[col * K + k];
        y[row * N + col] = (acc + b[col]) * 2.0f > 0.0f ? (acc + b[col]) * 2.0f : (acc + b[col]) * 2.0f * 0.1f;
    }
}
