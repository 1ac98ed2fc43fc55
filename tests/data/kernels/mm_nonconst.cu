// Shaped like cuda-samples' matrixMul_kernel.cu: no parameter is const (C is written, A and B only
// read), the work is in a template __device__ function that extern "C" entries call with a literal
// tile, and there are no bounds checks. Written for optiml's tests of `optiml init`.
template <int block_size, typename size_type>
__device__ void matrixMul(float *C, float *A, float *B, size_type wA, size_type wB) {
  size_type bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  size_type aBegin = wA * block_size * by;
  size_type aEnd = aBegin + wA - 1;
  size_type bBegin = block_size * bx;
  float Csub = 0;
  for (size_type a = aBegin, b = bBegin; a <= aEnd; a += block_size, b += block_size * wB) {
    __shared__ float As[block_size][block_size];
    __shared__ float Bs[block_size][block_size];
    As[ty][tx] = A[a + wA * ty + tx];
    Bs[ty][tx] = B[b + wB * ty + tx];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < block_size; ++k) Csub += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  size_type c = wB * block_size * by + block_size * bx;
  C[c + wB * ty + tx] = Csub;
}

extern "C" __global__ void matrixMul_bs16_64bit(float *C, float *A, float *B, size_t wA, size_t wB) {
  matrixMul<16, size_t>(C, A, B, wA, wB);
}
