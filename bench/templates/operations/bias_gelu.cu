// GELU (tanh form) of x plus a bias broadcast along the rows, float32 [rows, cols]: a first kernel,
// one element a thread over the flattened matrix.
__global__ void bias_gelu(const float *x, const float *bias, float *y, int rows, int cols) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        float v = x[i] + bias[i % cols];
        float u = 0.7978845608f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}
