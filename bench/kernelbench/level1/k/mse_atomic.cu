// 94_MSELoss, style A: one thread per element, an atomicAdd per element of the scaled square.
__global__ void mse_kernel(const float* predictions, const float* targets, float* out, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float d = predictions[idx] - targets[idx];
        atomicAdd(out, d * d / n);
    }
}
