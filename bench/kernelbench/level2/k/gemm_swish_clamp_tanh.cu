// 81_Gemm_Swish_Divide_Clamp_Tanh_Clamp: a thread an output, the chain step by step on a local.
__global__ void gemm_swish_div_clamp_tanh_clamp(const float* x, const float* weight, const float* bias, float* out,
                                                int batch_size, int in_features, int out_features) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch_size || col >= out_features) return;
    float acc = 0.0f;
    for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[col * in_features + k];
    float v = acc + bias[col];
    v = v / (1.0f + expf(-v));        // swish
    v = v / 2.0f;
    if (v < -1.0f) v = -1.0f;
    if (v > 1.0f) v = 1.0f;
    v = tanhf(v);
    if (v < -1.0f) v = -1.0f;
    if (v > 1.0f) v = 1.0f;
    out[row * out_features + col] = v;
}
