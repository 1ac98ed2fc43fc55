// 19_ReLU, style B: float4 loads, a thread per 4 elements, scalar tail.
__global__ void relu_vec4_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (idx < n4) {
        float4 v = reinterpret_cast<const float4*>(x)[idx];
        v.x = fmaxf(v.x, 0.0f);
        v.y = fmaxf(v.y, 0.0f);
        v.z = fmaxf(v.z, 0.0f);
        v.w = fmaxf(v.w, 0.0f);
        reinterpret_cast<float4*>(y)[idx] = v;
    }
    int tail = n4 * 4 + idx;
    if (idx < n - n4 * 4) {
        y[tail] = fmaxf(x[tail], 0.0f);
    }
}
