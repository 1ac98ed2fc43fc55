// 40_LayerNorm: normalized_shape = (features, dim1, dim2), so each batch row is features * dim1 * dim2
// elements; one block per row, mean then variance by shared trees, weight and bias per element of the row.
#define THREADS 1024
__global__ void layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                  const float* __restrict__ bias, float* __restrict__ y,
                                  int batch_size, int features, int dim1, int dim2) {
    __shared__ float sbuf[THREADS];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    int N = features * dim1 * dim2;
    const float* xr = x + (size_t)row * N;
    float* yr = y + (size_t)row * N;

    float sum = 0.0f;
    for (int i = tid; i < N; i += THREADS) sum += xr[i];
    sbuf[tid] = sum;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) sbuf[tid] += sbuf[tid + s];
        __syncthreads();
    }
    float mean = sbuf[0] / N;
    __syncthreads();

    float var = 0.0f;
    for (int i = tid; i < N; i += THREADS) {
        float d = xr[i] - mean;
        var += d * d;
    }
    sbuf[tid] = var;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (tid < s) sbuf[tid] += sbuf[tid + s];
        __syncthreads();
    }
    float rstd = rsqrtf(sbuf[0] / N + 1e-5f);

    for (int i = tid; i < N; i += THREADS) {
        yr[i] = (xr[i] - mean) * rstd * weight[i] + bias[i];
    }
}
