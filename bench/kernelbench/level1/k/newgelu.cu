// 88_MinGPTNewGelu: tanh approximation, powf as in the Model.
__global__ void new_gelu_kernel(const float* x, float* y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        const float c = 0.7978845608028654f;   // sqrt(2 / pi)
        float inner = c * (v + 0.044715f * powf(v, 3.0f));
        y[idx] = 0.5f * v * (1.0f + tanhf(inner));
    }
}
