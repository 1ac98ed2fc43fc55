// 12_Gemm_Multiply_LeakyReLU, style B: a thread an output, the epilogue through a local and a conditional,
// the multiplier and slope passed as arguments.
__global__ void gemm_multiply_leaky_relu_kernel(const float* x, const float* weight, const float* bias, float* out,
                                                int batch_size, int in_features, int out_features,
                                                float multiplier, float negative_slope) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch_size || col >= out_features) return;
    float acc = 0.0f;
    for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[col * in_features + k];
    float v = (acc + bias[col]) * multiplier;
    if (v < 0.0f) v *= negative_slope;
    out[row * out_features + col] = v;
}
