// Row softmax with KernelBench level 1 task 23's row length (393216 floats a row, far past what
// registers hold): a first kernel with a block of 256 a row, three passes over the row, each reduced
// with warp shuffles and then across the warps through shared memory.
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, o));
    return v;
}
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    return v;
}
__global__ void softmax_kb(const float *x, float *y, int rows, int cols) {
    __shared__ float part[8];
    __shared__ float row_max, row_sum;
    int row = blockIdx.x;
    if (row >= rows) return;
    const float *xr = x + (size_t)row * cols;
    float *yr = y + (size_t)row * cols;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    m = warp_max(m);
    if (lane == 0) part[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = part[0];
        for (int w = 1; w < 8; w++) t = fmaxf(t, part[w]);
        row_max = t;
    }
    __syncthreads();
    m = row_max;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
    s = warp_sum(s);
    __syncthreads();
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < 8; w++) t += part[w];
        row_sum = t;
    }
    __syncthreads();
    s = row_sum;

    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / s;
}
