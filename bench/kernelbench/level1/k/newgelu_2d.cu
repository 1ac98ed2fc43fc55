// 88_MinGPTNewGelu, style B: a 2-D grid over (row, col) of the batch_size x dim input.
__global__ void new_gelu_2d_kernel(const float* x, float* y, int batch_size, int dim) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < batch_size && col < dim) {
        int idx = row * dim + col;
        float v = x[idx];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[idx] = 0.5f * v * (1.0f + tanhf(inner));
    }
}
