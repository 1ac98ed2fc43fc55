// 53_Min_reduction_over_a_dimension (dim 1): one thread per output, if-compare running min.
__global__ void min_dim1_kernel(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim1, int dim2) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch_size * dim2) {
        int b = idx / dim2, k = idx % dim2;
        float m = x[(size_t)b * dim1 * dim2 + k];
        for (int j = 1; j < dim1; ++j) {
            float v = x[((size_t)b * dim1 + j) * dim2 + k];
            if (v < m) m = v;
        }
        out[idx] = m;
    }
}
