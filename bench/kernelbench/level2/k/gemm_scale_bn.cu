// 33_Gemm_Scale_BatchNorm: training-mode BatchNorm (the batch's statistics) after the Linear times the
// Model's scale. A block a column, each thread a strided share of the rows; the Model's own scale first,
// then the Linear's and BatchNorm's parameters and buffers, as in its state_dict.
#define THREADS 256
__device__ float block_sum(float v, float* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void gemm_scale_bn(const float* A, const float* scale, const float* W, const float* b, const float* gamma,
                              const float* beta, const float* run_mean, const float* run_var, const long long* n_batches,
                              float* C, int M, int K, int N) {
    __shared__ float red[THREADS];
    int n = blockIdx.x, t = threadIdx.x;
    float s = 0.0f;
    for (int m = t; m < M; m += THREADS) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) acc += A[m * K + k] * W[n * K + k];
        float v = (acc + b[n]) * scale[n];
        C[m * N + n] = v;
        s += v;
    }
    float mean = block_sum(s, red) / M;
    float q = 0.0f;
    for (int m = t; m < M; m += THREADS) q += (C[m * N + n] - mean) * (C[m * N + n] - mean);
    float rstd = rsqrtf(block_sum(q, red) / M + 1e-5f);
    for (int m = t; m < M; m += THREADS) C[m * N + n] = (C[m * N + n] - mean) * rstd * gamma[n] + beta[n];
}
