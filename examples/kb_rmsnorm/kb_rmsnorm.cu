// RMSNorm with a per-feature scale for the KernelBench-format task rmsnorm_task.py:
// y[r][c] = x[r][c] / sqrt(mean(x[r]**2) + eps) * weight[c]. A straightforward first kernel:
// one block per row, the sum of squares reduced through shared memory, then a second pass.
#define BLOCK 256

__global__ void rmsnorm_kernel(const float *x, const float *weight, float *y, int batch_size,
                               int features, float eps) {
  __shared__ float red[BLOCK];
  int row = blockIdx.x;
  const float *xr = x + (size_t)row * features;
  float *yr = y + (size_t)row * features;

  float ss = 0.0f;
  for (int c = threadIdx.x; c < features; c += BLOCK) ss += xr[c] * xr[c];
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  float inv = rsqrtf(red[0] / features + eps);
  for (int c = threadIdx.x; c < features; c += BLOCK) yr[c] = xr[c] * inv * weight[c];
}
