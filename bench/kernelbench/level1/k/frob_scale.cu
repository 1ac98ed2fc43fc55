// 37_FrobeniusNorm_, kernel 2 of 2: y = x / sqrt(sumsq[0]).
__global__ void frob_scale_kernel(const float* __restrict__ x, const float* __restrict__ sumsq, float* __restrict__ y, int n) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n) {
        float norm = sqrtf(sumsq[0]);
        y[idx] = x[idx] / norm;
    }
}
