// 31_ELU: alpha as an argument.
__global__ void elu_kernel(const float* x, float* y, float alpha, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        y[idx] = (v > 0.0f) ? v : alpha * (expf(v) - 1.0f);
    }
}
