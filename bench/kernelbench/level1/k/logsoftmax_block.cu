// 24_LogSoftmax: one block per row; warp shuffles then one shared slot per warp (the two-level block reduction).
__device__ float warpReduceMax(float v) {
    for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, off));
    return v;
}
__device__ float warpReduceSum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffff, v, off);
    return v;
}
__global__ void log_softmax_kernel(const float* __restrict__ input, float* __restrict__ output, int batch_size, int dim) {
    __shared__ float shared[32];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    int lane = tid % 32, wid = tid / 32;
    int nwarps = blockDim.x / 32;
    const float* in = input + (size_t)row * dim;
    float* out = output + (size_t)row * dim;

    float local_max = -INFINITY;
    for (int i = tid; i < dim; i += blockDim.x) local_max = fmaxf(local_max, in[i]);
    local_max = warpReduceMax(local_max);
    if (lane == 0) shared[wid] = local_max;
    __syncthreads();
    local_max = (tid < nwarps) ? shared[lane] : -INFINITY;
    if (wid == 0) local_max = warpReduceMax(local_max);
    if (tid == 0) shared[0] = local_max;
    __syncthreads();
    float row_max = shared[0];
    __syncthreads();

    float local_sum = 0.0f;
    for (int i = tid; i < dim; i += blockDim.x) local_sum += expf(in[i] - row_max);
    local_sum = warpReduceSum(local_sum);
    if (lane == 0) shared[wid] = local_sum;
    __syncthreads();
    local_sum = (tid < nwarps) ? shared[lane] : 0.0f;
    if (wid == 0) local_sum = warpReduceSum(local_sum);
    if (tid == 0) shared[0] = local_sum;
    __syncthreads();
    float log_sum = logf(shared[0]);

    for (int i = tid; i < dim; i += blockDim.x) out[i] = in[i] - row_max - log_sum;
}
