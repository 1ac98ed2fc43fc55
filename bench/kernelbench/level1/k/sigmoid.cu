// 21_Sigmoid: one thread per element, early return.
__global__ void sigmoid_kernel(const float* x, float* out, int size) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    out[i] = 1.0f / (1.0f + expf(-x[i]));
}
