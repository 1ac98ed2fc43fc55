// 29_Matmul_Mish_Mish: a thread an output, Mish twice through a __device__ helper.
__device__ float mish(float v) {
    float sp = v > 20.0f ? v : log1pf(expf(v));      // softplus, as PyTorch's threshold of 20
    return v * tanhf(sp);
}

__global__ void linear_mish_mish(const float* x, const float* weight, const float* bias, float* out,
                                 int batch_size, int in_features, int out_features) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size && col < out_features) {
        float acc = 0.0f;
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[col * in_features + k];
        out[row * out_features + col] = mish(mish(acc + bias[col]));
    }
}
