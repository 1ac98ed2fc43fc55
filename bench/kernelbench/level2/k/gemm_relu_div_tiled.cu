// 63_Gemm_ReLU_Divide, style A: a 16 x 16 shared-memory tiled GEMM, ReLU and the division inline.
#define TILE 16
__global__ void gemm_relu_div_tiled(const float* x, const float* weight, const float* bias, float* out,
                                    int batch_size, int in_features, int out_features) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < in_features; k0 += TILE) {
        xs[ty][tx] = (row < batch_size && k0 + tx < in_features) ? x[row * in_features + k0 + tx] : 0.0f;
        int wrow = blockIdx.x * TILE + ty;
        ws[ty][tx] = (wrow < out_features && k0 + tx < in_features) ? weight[wrow * in_features + k0 + tx] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += xs[ty][k] * ws[tx][k];
        __syncthreads();
    }
    if (row < batch_size && col < out_features) out[row * out_features + col] = fmaxf(acc + bias[col], 0.0f) / 2.0f;
}
