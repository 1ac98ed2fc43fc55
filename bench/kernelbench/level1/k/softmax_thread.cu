// 23_Softmax, style C: the plainest first kernel, one thread per row, three sequential passes.
__global__ void softmax_rows_kernel(const float* x, float* y, int batch_size, int dim) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < batch_size) {
        float max_val = x[row * dim];
        for (int j = 1; j < dim; j++) {
            max_val = fmaxf(max_val, x[row * dim + j]);
        }
        float sum = 0.0f;
        for (int j = 0; j < dim; j++) {
            sum += expf(x[row * dim + j] - max_val);
        }
        for (int j = 0; j < dim; j++) {
            y[row * dim + j] = expf(x[row * dim + j] - max_val) / sum;
        }
    }
}
