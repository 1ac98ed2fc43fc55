// 20_LeakyReLU: grid-stride loop, negative slope as a kernel argument.
__global__ void leaky_relu_kernel(const float* __restrict__ x, float* __restrict__ y, float negative_slope, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i];
        y[i] = v > 0.0f ? v : v * negative_slope;
    }
}
