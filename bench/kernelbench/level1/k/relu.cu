// 19_ReLU: one thread per element.
__global__ void relu_kernel(const float* x, float* y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        y[idx] = fmaxf(x[idx], 0.0f);
    }
}
