// 70_Gemm_Sigmoid_Scaling_ResidualAdd, style A: a thread an output; sigmoid through a __device__ helper.
__device__ float sigmoid_f(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void gemm_sigmoid_residual(const float* x, const float* weight, const float* bias, float* out,
                                      int batch_size, int input_size, int hidden_size) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size && col < hidden_size) {
        float acc = 0.0f;
        for (int k = 0; k < input_size; ++k) acc += x[row * input_size + k] * weight[col * input_size + k];
        out[row * hidden_size + col] = sigmoid_f(acc + bias[col]) * 2.0f + (acc + bias[col]);
    }
}
