// 23_Softmax, style A: one block per row, shared-memory tree reductions for max and sum.
#define THREADS 256
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int batch_size, int dim) {
    __shared__ float sdata[THREADS];
    int row = blockIdx.x;
    int tid = threadIdx.x;
    const float* row_x = x + (size_t)row * dim;
    float* row_out = out + (size_t)row * dim;

    float max_val = -INFINITY;
    for (int i = tid; i < dim; i += blockDim.x) {
        max_val = fmaxf(max_val, row_x[i]);
    }
    sdata[tid] = max_val;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] = fmaxf(sdata[tid], sdata[tid + s]);
        __syncthreads();
    }
    max_val = sdata[0];
    __syncthreads();

    float sum = 0.0f;
    for (int i = tid; i < dim; i += blockDim.x) {
        sum += expf(row_x[i] - max_val);
    }
    sdata[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    sum = sdata[0];

    for (int i = tid; i < dim; i += blockDim.x) {
        row_out[i] = expf(row_x[i] - max_val) / sum;
    }
}
