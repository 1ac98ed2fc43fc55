// 14_Gemm_Divide_Sum_Scaling, style A: a block a row, each thread a strided share of the row's outputs,
// their sum by a shared-memory tree; the Model's weight only (no bias).
#define THREADS 256
__global__ void gemm_div_sum_scale(const float* x, const float* weight, float* out,
                                   int batch_size, int input_size, int hidden_size) {
    __shared__ float part[THREADS];
    int row = blockIdx.x;
    float s = 0.0f;
    for (int j = threadIdx.x; j < hidden_size; j += THREADS) {
        float acc = 0.0f;
        for (int k = 0; k < input_size; ++k) acc += x[row * input_size + k] * weight[j * input_size + k];
        s += acc / 2.0f;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = part[0] * 1.5f;
}
