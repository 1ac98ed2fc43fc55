// 68_Matmul_Min_Subtract: a thread an output; the constant is a one-element Parameter (the Model's own,
// so first in its state_dict).
__global__ void matmul_min_subtract(const float* x, const float* constant, const float* weight, const float* bias,
                                    float* out, int batch_size, int in_features, int out_features) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size && col < out_features) {
        float acc = 0.0f;
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[col * in_features + k];
        out[row * out_features + col] = fminf(acc + bias[col], constant[0]) - constant[0];
    }
}
