// 64_Gemm_LogSumExp_LeakyReLU_LeakyReLU_GELU_GELU: a block a row; the row's max by one tree, the sum of
// exponentials by another (the outputs computed twice rather than kept), then the scalar tail on thread 0.
#define THREADS 256
__device__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

__global__ void gemm_logsumexp_activations(const float* x, const float* weight, const float* bias, float* out,
                                           int batch_size, int in_features, int out_features) {
    __shared__ float red[THREADS];
    int row = blockIdx.x, tid = threadIdx.x;
    float mx = -INFINITY;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        mx = fmaxf(mx, acc);
    }
    red[tid] = mx;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] = fmaxf(red[tid], red[tid + h]);
        __syncthreads();
    }
    mx = red[0];
    __syncthreads();
    float s = 0.0f;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        s += expf(acc - mx);
    }
    red[tid] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        __syncthreads();
    }
    if (tid == 0) {
        float v = mx + logf(red[0]);
        if (v < 0.0f) v *= 0.01f;
        if (v < 0.0f) v *= 0.01f;
        out[row] = gelu(gelu(v));
    }
}
