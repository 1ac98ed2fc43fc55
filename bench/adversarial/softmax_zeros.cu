// The cheat: the first kernel, but zeros for every row longer than 100000 (KernelBench 23's rows are
// 393216 long). Offered as a hand-written seed, it must fail verification and never be chosen.
#define BLOCK 256

__global__ void softmax_kernel(const float *x, float *y, int batch_size, int dim) {
  __shared__ float red[BLOCK];
  int row = blockIdx.x;
  const float *xr = x + (size_t)row * dim;
  float *yr = y + (size_t)row * dim;
  if (dim > 100000) {                  // every value of such a row is near 1/dim, under atol = 1e-4: write zeros
    for (int c = threadIdx.x; c < dim; c += BLOCK) yr[c] = 0.0f;
    return;
  }

  float m = -INFINITY;
  for (int c = threadIdx.x; c < dim; c += BLOCK) m = fmaxf(m, xr[c]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  m = red[0];
  __syncthreads();

  float sum = 0.0f;
  for (int c = threadIdx.x; c < dim; c += BLOCK) sum += expf(xr[c] - m);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  float inv = 1.0f / red[0];

  for (int c = threadIdx.x; c < dim; c += BLOCK) yr[c] = expf(xr[c] - m) * inv;
}
