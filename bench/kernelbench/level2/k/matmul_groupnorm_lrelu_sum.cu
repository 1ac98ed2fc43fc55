// 62_Matmul_GroupNorm_LeakyReLU_Sum: a block a (group, row); the group's outputs written, their mean and
// variance by shared-memory trees, then normalized, LeakyReLU and x + x in place.
#define THREADS 128
__global__ void matmul_groupnorm_lrelu_sum(const float* A, const float* W, const float* b, const float* gamma,
                                           const float* beta, float* C, int M, int K, int N, int G) {
    __shared__ float red[THREADS];
    int g = blockIdx.x, m = blockIdx.y, t = threadIdx.x;
    int per = N / G;
    float* cg = C + m * N + g * per;
    float s = 0.0f;
    for (int c = t; c < per; c += THREADS) {
        int n = g * per + c;
        float acc = b[n];
        for (int k = 0; k < K; ++k) acc += A[m * K + k] * W[n * K + k];
        cg[c] = acc;
        s += acc;
    }
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float mean = red[0] / per;
    __syncthreads();
    float q = 0.0f;
    for (int c = t; c < per; c += THREADS) q += (cg[c] - mean) * (cg[c] - mean);
    red[t] = q;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float rstd = rsqrtf(red[0] / per + 1e-5f);
    for (int c = t; c < per; c += THREADS) {
        int n = g * per + c;
        float v = (cg[c] - mean) * rstd * gamma[n] + beta[n];
        v = v > 0.0f ? v : 0.01f * v;
        cg[c] = v + v;
    }
}
