// 48_Mean_reduction_over_a_dimension (dim 1, no keepdim): one thread per output, 2-D grid.
__global__ void mean_dim1_kernel(const float* x, float* out, int batch_size, int dim1, int dim2) {
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    int b = blockIdx.y;
    if (k < dim2) {
        float sum = 0.0f;
        for (int j = 0; j < dim1; j++) {
            sum += x[b * dim1 * dim2 + j * dim2 + k];
        }
        out[b * dim2 + k] = sum / dim1;
    }
}
