// 94_MSELoss, style B: grid-stride partial sums, a shared-memory tree a block, one atomicAdd a block, divided at the end.
#define BLOCK_SIZE 256
__global__ void mse_loss_kernel(const float* __restrict__ pred, const float* __restrict__ tgt, float* __restrict__ out, int n) {
    __shared__ float sdata[BLOCK_SIZE];
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int i = blockIdx.x * BLOCK_SIZE + tid; i < n; i += BLOCK_SIZE * gridDim.x) {
        float d = pred[i] - tgt[i];
        sum += d * d;
    }
    sdata[tid] = sum;
    __syncthreads();
    for (int s = BLOCK_SIZE / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, sdata[0] / n);
}
