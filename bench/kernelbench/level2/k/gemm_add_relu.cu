// 76_Gemm_Add_ReLU: a thread an output; the Linear has no bias of its own, the added one is the Model's
// own Parameter, first in its state_dict.
__global__ void gemm_add_relu(const float* A, const float* bias, const float* W, float* C, int M, int N, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[row * K + k] * W[col * K + k];
        C[row * N + col] = fmaxf(acc + bias[col], 0.0f);
    }
}
