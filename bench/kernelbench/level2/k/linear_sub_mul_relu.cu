// 9_Matmul_Subtract_Multiply_ReLU: a 16 x 16 shared-memory tiled GEMM, the epilogue inline.
#define TILE 16
__global__ void linear_sub_mul_relu(const float* __restrict__ A, const float* __restrict__ W, const float* __restrict__ bias,
                                    float* __restrict__ C, int rows, int inner, int cols) {
    __shared__ float As[TILE][TILE];
    __shared__ float Ws[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (inner + TILE - 1) / TILE; ++t) {
        int k = t * TILE + threadIdx.x;
        As[threadIdx.y][threadIdx.x] = (row < rows && k < inner) ? A[row * inner + k] : 0.0f;
        int wr = blockIdx.x * TILE + threadIdx.y;           // a row of W is a column of C
        Ws[threadIdx.y][threadIdx.x] = (wr < cols && k < inner) ? W[wr * inner + k] : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < TILE; ++kk) acc += As[threadIdx.y][kk] * Ws[threadIdx.x][kk];
        __syncthreads();
    }
    if (row < rows && col < cols) C[row * cols + col] = fmaxf((acc + bias[col] - 2.0f) * 1.5f, 0.0f);
}
