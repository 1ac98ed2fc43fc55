// 98_KLDivLoss (kl_div(log(p), t, 'batchmean')): sum t * (log t - log p) / batch_size; warp shuffle then one atomic a warp.
__global__ void kl_div_kernel(const float* __restrict__ predictions, const float* __restrict__ targets,
                              float* __restrict__ out, int n, int batch_size) {
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float t = targets[i];
        float p = predictions[i];
        sum += (t > 0.0f) ? t * (logf(t) - logf(p)) : 0.0f;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffff, sum, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, sum / batch_size);
}
