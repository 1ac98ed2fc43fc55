// 26_GELU_: exact GELU with erff, one thread per element.
__global__ void gelu_kernel(const float* x, float* y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        y[idx] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}
