// 30_Softsign: x / (1 + |x|).
__global__ void softsign_kernel(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] / (1.0f + fabsf(x[i]));
}
