// 26_GELU_, style B: grid-stride loop over size_t, a device helper, constants in constexpr.
constexpr float kInvSqrt2 = 0.7071067811865476f;

__device__ inline float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, size_t n) {
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = gelu(x[i]);
    }
}
