// 18_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp: a block a row summing the Linear's outputs; the max, mean
// and two logsumexps that follow act on one element each, so the sum is the answer.
#define THREADS 256
__global__ void linear_sum_chain(const float* x, const float* weight, const float* bias, float* out,
                                 int batch_size, int in_features, int out_features) {
    __shared__ float sdata[THREADS];
    int row = blockIdx.x, tid = threadIdx.x;
    float s = 0.0f;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        s += acc;
    }
    sdata[tid] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) sdata[tid] += sdata[tid + h];
        __syncthreads();
    }
    if (tid == 0) out[row] = sdata[0];
}
