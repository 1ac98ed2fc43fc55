// 55_Matmul_MaxPool_Sum_Scale: a block a row; each thread the max of pairs of outputs (MaxPool1d of 2,
// a last odd one dropped), their sum by a shared-memory tree, then the scale.
#define THREADS 256
__global__ void matmul_maxpool_sum_scale(const float* A, const float* W, const float* bias, float* out, int M, int K, int N) {
    __shared__ float red[THREADS];
    int m = blockIdx.x, t = threadIdx.x;
    float s = 0.0f;
    for (int p = t; p < N / 2; p += THREADS) {
        float a0 = bias[2 * p], a1 = bias[2 * p + 1];
        for (int k = 0; k < K; ++k) {
            float xv = A[m * K + k];
            a0 += xv * W[(2 * p) * K + k];
            a1 += xv * W[(2 * p + 1) * K + k];
        }
        s += fmaxf(a0, a1);
    }
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    if (t == 0) out[m] = red[0] * 0.5f;
}
