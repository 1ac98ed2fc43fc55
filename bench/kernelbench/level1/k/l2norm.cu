// 39_L2Norm_: x / ||x||_2 over each row; a block per row, warp shuffles then a shared slot per warp, thread 0 writes the norm.
__global__ void l2_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int batch_size, int dim) {
    __shared__ float warp_sums[32];
    __shared__ float norm;
    int row = blockIdx.x;
    const float* xr = x + (size_t)row * dim;
    float* yr = y + (size_t)row * dim;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = xr[j];
        sum += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffff, sum, off);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = (threadIdx.x < blockDim.x / 32) ? warp_sums[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
        if (threadIdx.x == 0) norm = sqrtf(v);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
        yr[j] = xr[j] / norm;
    }
}
