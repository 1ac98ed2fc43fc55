// y = relu(x @ w^T + bias): nn.Linear + bias + ReLU in fp32, a first kernel. One thread per output,
// 16 x 16 blocks, the dot product straight from global memory.
__global__ void linear_relu(const float* x, const float* w, const float* bias, float* y, int M, int N, int K) {
    int row = blockIdx.y * 16 + threadIdx.y;
    int col = blockIdx.x * 16 + threadIdx.x;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) sum += x[row * K + k] * w[col * K + k];
        y[row * N + col] = fmaxf(sum + bias[col], 0.0f);
    }
}
