// 41_Gemm_BatchNorm_GELU_ReLU: the Model runs in training mode, so BatchNorm normalizes each output column
// by the batch's mean and (biased) variance. A block a column: the column's outputs written, the batch
// statistics by shared-memory trees, then normalized, GELU and ReLU in place. The running statistics are
// in the Model's state_dict, so the entry takes them; the forward does not read them.
#define THREADS 256
__global__ void gemm_bn_gelu_relu(const float* x, const float* weight, const float* bias, const float* bn_weight,
                                  const float* bn_bias, const float* running_mean, const float* running_var,
                                  const long long* num_batches_tracked, float* out,
                                  int batch_size, int in_features, int out_features) {
    __shared__ float red[THREADS];
    int col = blockIdx.x, tid = threadIdx.x;
    float s = 0.0f;
    for (int i = tid; i < batch_size; i += THREADS) {
        float acc = bias[col];
        for (int k = 0; k < in_features; ++k) acc += x[i * in_features + k] * weight[col * in_features + k];
        out[i * out_features + col] = acc;
        s += acc;
    }
    red[tid] = s;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        __syncthreads();
    }
    float mean = red[0] / batch_size;
    __syncthreads();
    float q = 0.0f;
    for (int i = tid; i < batch_size; i += THREADS) {
        float d = out[i * out_features + col] - mean;
        q += d * d;
    }
    red[tid] = q;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) red[tid] += red[tid + h];
        __syncthreads();
    }
    float rstd = rsqrtf(red[0] / batch_size + 1e-5f);
    for (int i = tid; i < batch_size; i += THREADS) {
        float v = (out[i * out_features + col] - mean) * rstd * bn_weight[col] + bn_bias[col];
        v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        out[i * out_features + col] = fmaxf(v, 0.0f);
    }
}
