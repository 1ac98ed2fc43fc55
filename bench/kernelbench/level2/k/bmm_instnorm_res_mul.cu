// 28_BMM_InstanceNorm_Sum_ResidualAdd_Multiply: InstanceNorm2d over a (1, out_features) plane is a norm of
// the row without weights; a block a row, mean and variance by shared-memory trees, then (v + y) * y.
#define THREADS 256
__global__ void bmm_instnorm_res_mul(const float* x, const float* y, const float* W, const float* b, float* out,
                                     int M, int K, int N) {
    __shared__ float red[THREADS];
    int m = blockIdx.x, t = threadIdx.x;
    float* o = out + m * N;
    float s = 0.0f;
    for (int n = t; n < N; n += THREADS) {
        float acc = b[n];
        for (int k = 0; k < K; ++k) acc += x[m * K + k] * W[n * K + k];
        o[n] = acc;
        s += acc;
    }
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float mean = red[0] / N;
    __syncthreads();
    float q = 0.0f;
    for (int n = t; n < N; n += THREADS) q += (o[n] - mean) * (o[n] - mean);
    red[t] = q;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float rstd = rsqrtf(red[0] / N + 1e-5f);
    for (int n = t; n < N; n += THREADS) {
        float yv = y[m * N + n];
        o[n] = ((o[n] - mean) * rstd + yv) * yv;
    }
}
