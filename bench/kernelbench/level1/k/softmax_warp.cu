// 23_Softmax, style B: one warp per row, 8 rows a block, __shfl_down_sync reductions, result broadcast by __shfl_sync.
#define WARPS_PER_BLOCK 8
__global__ void softmax_warp_kernel(const float* __restrict__ x, float* __restrict__ y, int batch_size, int dim) {
    int warp = threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * WARPS_PER_BLOCK + warp;
    if (row >= batch_size) return;
    const float* xr = x + (size_t)row * dim;
    float* yr = y + (size_t)row * dim;

    float m = -INFINITY;
    for (int j = lane; j < dim; j += 32) m = fmaxf(m, xr[j]);
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffff, m, off));
    m = __shfl_sync(0xffffffff, m, 0);

    float s = 0.0f;
    for (int j = lane; j < dim; j += 32) s += expf(xr[j] - m);
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffff, s, off);
    s = __shfl_sync(0xffffffff, s, 0);

    for (int j = lane; j < dim; j += 32) yr[j] = expf(xr[j] - m) / s;
}
