// 29_Softplus: beta 1, threshold 20 (as PyTorch), an early-out branch.
__global__ void softplus_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        if (v > 20.0f) {
            y[idx] = v;
        } else {
            y[idx] = log1pf(expf(v));
        }
    }
}
