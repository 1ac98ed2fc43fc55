// Sum of n float32 values into out[0]: a first kernel. Each block of 256 threads loads 256 values,
// one a thread, reduces them through shared memory, and thread 0 adds the block's sum atomically.
__global__ void block_sum(const float *x, float *out, int n) {
    __shared__ float sh[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    sh[t] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, sh[0]);
}
