// 22_Tanh: one thread per element, 64-bit index.
__global__ void tanh_kernel(const float* __restrict__ input, float* __restrict__ output, long long num_elements) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < num_elements) {
        output[idx] = tanhf(input[idx]);
    }
}
