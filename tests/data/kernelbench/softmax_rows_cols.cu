// A first kernel for KernelBench 23 (softmax over dim 1) with sizes named rows and cols, not the task's
// batch_size and dim: a block a row, three passes, shared-memory trees.
#define BLOCK 256
__global__ void softmax_rows(const float* in, float* out, int rows, int cols) {
    __shared__ float red[BLOCK];
    int r = blockIdx.x;
    if (r >= rows) return;
    const float* x = in + (size_t)r * cols;
    float* y = out + (size_t)r * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += BLOCK) m = fmaxf(m, x[c]);
    red[threadIdx.x] = m; __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) { if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]); __syncthreads(); }
    m = red[0]; __syncthreads();
    float sum = 0.f;
    for (int c = threadIdx.x; c < cols; c += BLOCK) sum += expf(x[c] - m);
    red[threadIdx.x] = sum; __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) { if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s]; __syncthreads(); }
    float inv = 1.f / red[0];
    for (int c = threadIdx.x; c < cols; c += BLOCK) y[c] = expf(x[c] - m) * inv;
}
