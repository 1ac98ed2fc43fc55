// 97_Matmul_BatchNorm_BiasAdd_Divide_Swish: training-mode BatchNorm (the batch's statistics), then the
// Model's one-element bias, the division by 1.0 and swish. A block a column with shared-memory trees.
#define THREADS 256
__global__ void matmul_bn_bias_div_swish(const float* in, const float* bias1, const float* w, const float* b,
                                         const float* bn_w, const float* bn_b, const float* bn_mean, const float* bn_var,
                                         const long long* bn_count, float* out, int rows, int inner, int cols) {
    __shared__ float red[THREADS];
    int c = blockIdx.x, t = threadIdx.x;
    float s = 0.0f;
    for (int r = t; r < rows; r += THREADS) {
        float acc = b[c];
        for (int k = 0; k < inner; ++k) acc += in[r * inner + k] * w[c * inner + k];
        out[r * cols + c] = acc;
        s += acc;
    }
    red[t] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float mean = red[0] / rows;
    __syncthreads();
    float q = 0.0f;
    for (int r = t; r < rows; r += THREADS) q += (out[r * cols + c] - mean) * (out[r * cols + c] - mean);
    red[t] = q;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (t < h) red[t] += red[t + h];
        __syncthreads();
    }
    float rstd = rsqrtf(red[0] / rows + 1e-5f);
    for (int r = t; r < rows; r += THREADS) {
        float v = (out[r * cols + c] - mean) * rstd * bn_w[c] + bn_b[c];
        v = (v + bias1[0]) / 1.0f;
        out[r * cols + c] = v / (1.0f + expf(-v));
    }
}
