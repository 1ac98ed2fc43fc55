// 28_HardSigmoid: relu6(x + 3) / 6.
__global__ void hardsigmoid_kernel(const float* x, float* y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = (x[idx] + 3.0f) / 6.0f;
        y[idx] = fminf(fmaxf(v, 0.0f), 1.0f);
    }
}
