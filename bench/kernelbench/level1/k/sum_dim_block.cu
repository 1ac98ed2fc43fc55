// 47_Sum_reduction, style B: one block per output element (b, k), the dim1 values split over the block's threads, shared tree.
#define BLOCK 256
__global__ void sum_reduce_kernel(const float* x, float* out, int batch_size, int dim1, int dim2) {
    __shared__ float sdata[BLOCK];
    int b = blockIdx.x / dim2;
    int k = blockIdx.x % dim2;
    int tid = threadIdx.x;
    float s = 0.0f;
    for (int j = tid; j < dim1; j += BLOCK) {
        s += x[(size_t)b * dim1 * dim2 + (size_t)j * dim2 + k];
    }
    sdata[tid] = s;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) sdata[tid] += sdata[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
