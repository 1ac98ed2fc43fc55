// 88_Gemm_GroupNorm_Swish_Multiply_Swish: a block a row, the row in dynamic shared memory; then a thread
// a group: its mean and variance in a plain loop, its elements normalized, swish, times the Model's
// multiply_weight, swish again.
#define THREADS 256
__global__ void gemm_groupnorm_swish_mul_swish(const float* x, const float* multiply_weight, const float* weight,
                                               const float* bias, const float* gn_weight, const float* gn_bias,
                                               float* out, int batch_size, int in_features, int out_features,
                                               int num_groups) {
    extern __shared__ float rowv[];              // out_features floats
    int row = blockIdx.x, tid = threadIdx.x;
    for (int j = tid; j < out_features; j += THREADS) {
        float acc = bias[j];
        for (int k = 0; k < in_features; ++k) acc += x[row * in_features + k] * weight[j * in_features + k];
        rowv[j] = acc;
    }
    __syncthreads();
    int per = out_features / num_groups;
    for (int g = tid; g < num_groups; g += THREADS) {
        float mean = 0.0f, var = 0.0f;
        for (int c = 0; c < per; ++c) mean += rowv[g * per + c];
        mean /= per;
        for (int c = 0; c < per; ++c) var += (rowv[g * per + c] - mean) * (rowv[g * per + c] - mean);
        float rstd = rsqrtf(var / per + 1e-5f);
        for (int c = 0; c < per; ++c) {
            int j = g * per + c;
            float v = (rowv[j] - mean) * rstd * gn_weight[j] + gn_bias[j];
            v = v / (1.0f + expf(-v));
            v = v * multiply_weight[j];
            out[row * out_features + j] = v / (1.0f + expf(-v));
        }
    }
}
