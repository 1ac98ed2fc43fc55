// A first kernel for gemm_bias_relu_task.py: a thread an output, the weight as w and the bias as b
// (the Model's state_dict lists bias first).
__global__ void gemm_bias_relu(const float* x, const float* w, const float* b, float* y,
                               int batch_size, int in_features, int out_features) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size && col < out_features) {
        float acc = 0.f;
        for (int k = 0; k < in_features; k++) acc += x[row * in_features + k] * w[col * in_features + k];
        acc += b[col];
        y[row * out_features + col] = acc > 0.f ? acc : 0.f;
    }
}
