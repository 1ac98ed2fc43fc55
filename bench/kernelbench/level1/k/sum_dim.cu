// 47_Sum_reduction_over_a_dimension (dim 1 of batch x dim1 x dim2, keepdim): one thread per output (b, k), loop over dim1.
__global__ void sum_dim1_kernel(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim1, int dim2) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= batch_size * dim2) return;
    int b = idx / dim2;
    int k = idx % dim2;
    float sum = 0.0f;
    for (int j = 0; j < dim1; ++j) {
        sum += x[((size_t)b * dim1 + j) * dim2 + k];
    }
    out[idx] = sum;
}
