// 32_HardTanh: clamp to [-1, 1], grid-stride.
__global__ void hardtanh_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int stride = blockDim.x * gridDim.x;
    for (int i = idx; i < n; i += stride) {
        y[i] = fminf(fmaxf(x[i], -1.0f), 1.0f);
    }
}
