// A tiled matrix product whose tile is a template argument, instantiated by thin extern "C"
// wrappers with literal sizes, and launched with the same literal: the shape of code that a
// declared [tune] name (the template parameter) makes tunable. Written for optiml's tests.
template <int block_size, typename index_t>
__device__ void tiled_product(float *C, const float *A, const float *B, index_t wA, index_t wB) {
  __shared__ float As[block_size][block_size];
  __shared__ float Bs[block_size][block_size];
  index_t row = blockIdx.y * block_size + threadIdx.y;
  index_t col = blockIdx.x * block_size + threadIdx.x;
  float acc = 0.0f;
  for (index_t t = 0; t < wA; t += block_size) {
    As[threadIdx.y][threadIdx.x] = A[row * wA + t + threadIdx.x];
    Bs[threadIdx.y][threadIdx.x] = B[(t + threadIdx.y) * wB + col];
    __syncthreads();
    for (int k = 0; k < block_size; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[row * wB + col] = acc;
}

extern "C" __global__ void product_bs8(float *C, const float *A, const float *B, size_t wA, size_t wB) {
  tiled_product<8, size_t>(C, A, B, wA, wB);
}
extern "C" __global__ void product_bs16(float *C, const float *A, const float *B, size_t wA, size_t wB) {
  tiled_product<16, size_t>(C, A, B, wA, wB);
}
