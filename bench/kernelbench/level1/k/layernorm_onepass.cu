// 40_LayerNorm, style B: sum and sum of squares in one pass, warp shuffles plus a shared slot per warp,
// eps as an argument, the row length as an argument (features * dim1 * dim2, computed by the host).
__inline__ __device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}
__global__ void layernorm_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                 int batch_size, int norm_size, float eps) {
    __shared__ float s_sum[32];
    __shared__ float s_sq[32];
    int row = blockIdx.x;
    const float* xr = x + (size_t)row * norm_size;
    float* yr = y + (size_t)row * norm_size;
    float sum = 0.0f, sq = 0.0f;
    for (int i = threadIdx.x; i < norm_size; i += blockDim.x) {
        float v = xr[i];
        sum += v;
        sq += v * v;
    }
    sum = warp_sum(sum);
    sq = warp_sum(sq);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { s_sum[warp] = sum; s_sq[warp] = sq; }
    __syncthreads();
    if (warp == 0) {
        int nw = blockDim.x >> 5;
        sum = lane < nw ? s_sum[lane] : 0.0f;
        sq = lane < nw ? s_sq[lane] : 0.0f;
        sum = warp_sum(sum);
        sq = warp_sum(sq);
        if (lane == 0) { s_sum[0] = sum; s_sq[0] = sq; }
    }
    __syncthreads();
    float mean = s_sum[0] / norm_size;
    float var = s_sq[0] / norm_size - mean * mean;
    float rstd = rsqrtf(var + eps);
    for (int i = threadIdx.x; i < norm_size; i += blockDim.x) {
        yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
}
