// 49_Max_reduction_over_a_dimension (dim 1): one thread per output, running max with fmaxf.
__global__ void max_dim1_kernel(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim1, int dim2) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < batch_size * dim2) {
        int b = idx / dim2, k = idx % dim2;
        const float* p = x + (size_t)b * dim1 * dim2 + k;
        float m = -INFINITY;
        for (int j = 0; j < dim1; ++j) m = fmaxf(m, p[(size_t)j * dim2]);
        out[idx] = m;
    }
}
