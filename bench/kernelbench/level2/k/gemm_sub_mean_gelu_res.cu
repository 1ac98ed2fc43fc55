// 51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd: a block a row; the mean of the row's
// outputs less the subtracted Parameter by a tree (the logsumexp of one value is the value), its GELU
// then added to every element of the input row.
#define THREADS 256
__global__ void gemm_sub_mean_gelu_residual(const float* x, const float* subtract, const float* weight, const float* bias,
                                            float* out, int batch_size, int in_features, int out_features) {
    __shared__ float sdata[THREADS];
    int row = blockIdx.x, tid = threadIdx.x;
    float s = 0.0f;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        s += acc - subtract[j];
    }
    sdata[tid] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) sdata[tid] += sdata[tid + h];
        __syncthreads();
    }
    float mean = sdata[0] / out_features;
    float g = 0.5f * mean * (1.0f + erff(mean * 0.70710678118654752f));
    for (int k = tid; k < in_features; k += THREADS) out[row * in_features + k] = g + x[row * in_features + k];
}
