// out = in + bias broadcast over rows, M x N, with 2-D bounds checks; the row and column come
// from blockIdx * TILE + threadIdx. A template device function does the work.
#define TILE 16
template <typename T>
__device__ void add_row_bias(T *out, T *in, T *bias, int row, int col, int N) {
  out[row * N + col] = in[row * N + col] + bias[col];
}

__global__ void bias_add(float *out, float *in, float *bias, int M, int N) {
  int row = blockIdx.y * TILE + threadIdx.y;
  int col = blockIdx.x * TILE + threadIdx.x;
  if (row < M && col < N) add_row_bias<float>(out, in, bias, row, col, N);
}
