// Sums of n float32 values in chunks of 256 into partial[0 .. cdiv(n, 256)): a first kernel, the first
// pass of a two-pass reduction. Each block of 256 threads loads 256 values, one a thread, reduces them
// through shared memory, and thread 0 writes the block's sum as the block's partial; so the partials'
// layout is the block size, and no block-size move keeps it.
__global__ void block_partial(const float *x, float *partial, int n) {
    __shared__ float sh[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    sh[t] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    if (t == 0) partial[blockIdx.x] = sh[0];
}
