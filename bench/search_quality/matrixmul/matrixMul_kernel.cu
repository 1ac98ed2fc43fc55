// A matrix product in the form of NVIDIA cuda-samples' matrixMulDrv kernel (written for this
// benchmark, not copied): one tiled template whose tile is the template parameter `block_size`,
// and three C entries, one for each tile (8, 16 and 32). The spec launches the 16 one; without a
// [tune] table optiml still tunes its block_size, since the launch names it.
template <int block_size, typename index_t>
__device__ void matrixMul(float *C, const float *A, const float *B, index_t wA, index_t wB) {
  __shared__ float As[block_size][block_size];
  __shared__ float Bs[block_size][block_size];
  index_t bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  index_t first = wA * block_size * by, last = first + wA - 1;
  float acc = 0.0f;
  for (index_t a = first, b = block_size * bx; a <= last; a += block_size, b += block_size * wB) {
    As[ty][tx] = A[a + wA * ty + tx];
    Bs[ty][tx] = B[b + wB * ty + tx];
    __syncthreads();
#pragma unroll
    for (index_t k = 0; k < block_size; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  C[wB * block_size * by + block_size * bx + wB * ty + tx] = acc;
}

extern "C" __global__ void matrixMul_bs8_64bit(float *C, const float *A, const float *B, size_t wA, size_t wB) {
  matrixMul<8, size_t>(C, A, B, wA, wB);
}
extern "C" __global__ void matrixMul_bs16_64bit(float *C, const float *A, const float *B, size_t wA, size_t wB) {
  matrixMul<16, size_t>(C, A, B, wA, wB);
}
extern "C" __global__ void matrixMul_bs32_64bit(float *C, const float *A, const float *B, size_t wA, size_t wB) {
  matrixMul<32, size_t>(C, A, B, wA, wB);
}
