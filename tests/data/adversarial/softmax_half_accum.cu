// Row softmax whose per-thread sums accumulate in float16.
// An adversarial test kernel (see cases.py); the spec beside it is softmax_ok.toml's.
#include <cuda_fp16.h>
#define BLOCK 256

__global__ void softmax_kernel(const float *x, float *y, int batch_size, int dim) {
  __shared__ float red[BLOCK];
  int row = blockIdx.x;
  const float *xr = x + (size_t)row * dim;
  float *yr = y + (size_t)row * dim;

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

  __half hsum = __float2half(0.0f);                  // float16 accumulation in a float32 task
  for (int c = threadIdx.x; c < dim; c += BLOCK) hsum = __hadd(hsum, __float2half(expf(xr[c] - m)));
  red[threadIdx.x] = __half2float(hsum);
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  float inv = 1.0f / red[0];

  for (int c = threadIdx.x; c < dim; c += BLOCK) yr[c] = expf(xr[c] - m) * inv;
}
