// 30_Gemm_GroupNorm_Hardtanh: a block a row; the Linear's row written to the output, then each group in
// turn: its mean and variance by shared-memory trees, normalized, scaled and clamped in place.
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

__global__ void gemm_groupnorm_hardtanh(const float* x, const float* weight, const float* bias, const float* gn_weight,
                                        const float* gn_bias, float* out,
                                        int batch_size, int in_features, int out_features, int num_groups) {
    __shared__ float red[THREADS];
    int row = blockIdx.x, tid = threadIdx.x;
    float* y = out + row * out_features;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        y[j] = acc;
    }
    __syncthreads();
    int per = out_features / num_groups;
    for (int g = 0; g < num_groups; ++g) {
        float* yg = y + g * per;
        float s = 0.0f;
        for (int c = tid; c < per; c += THREADS) s += yg[c];
        float mean = block_sum(s, red) / per;
        float q = 0.0f;
        for (int c = tid; c < per; c += THREADS) q += (yg[c] - mean) * (yg[c] - mean);
        float rstd = rsqrtf(block_sum(q, red) / per + 1e-5f);
        for (int c = tid; c < per; c += THREADS) {
            float v = (yg[c] - mean) * rstd * gn_weight[g * per + c] + gn_bias[g * per + c];
            yg[c] = fminf(fmaxf(v, -2.0f), 2.0f);
        }
    }
}
