// 37_FrobeniusNorm_, kernel 1 of 2: the sum of squares of all elements (grid-stride, a block tree, one atomic a block).
#define BLOCK 256
__global__ void sum_squares_kernel(const float* __restrict__ x, float* __restrict__ sumsq, int n) {
    __shared__ float cache[BLOCK];
    int tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += blockDim.x * gridDim.x) {
        float v = x[i];
        acc += v * v;
    }
    cache[tid] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(sumsq, cache[0]);
}
