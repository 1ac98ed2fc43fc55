// 96_HuberLoss (smooth_l1, beta 1, mean): grid-stride per-thread sum, one atomicAdd a thread.
__global__ void huber_kernel(const float* __restrict__ pred, const float* __restrict__ target, float* __restrict__ out, int n) {
    float local = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float d = fabsf(pred[i] - target[i]);
        local += (d < 1.0f) ? 0.5f * d * d : d - 0.5f;
    }
    atomicAdd(out, local / n);
}
