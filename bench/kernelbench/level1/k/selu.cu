// 27_SELU_: constants by #define, a branch.
#define SELU_ALPHA 1.6732632423543772f
#define SELU_SCALE 1.0507009873554805f
__global__ void selu_kernel(const float* x, float* y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float v = x[idx];
        float r;
        if (v > 0.0f) {
            r = v;
        } else {
            r = SELU_ALPHA * (expf(v) - 1.0f);
        }
        y[idx] = SELU_SCALE * r;
    }
}
