// Strategy: a shared-memory tree per block with sequential addressing; each thread adds two
// elements while loading; one atomic per block.
#define BLOCK 256
// optiml:launch {grid = ["cdiv(N, 2 * BLOCK)"], block = ["BLOCK"], shared_mem = 0}

__global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, int N) {
    __shared__ float sdata[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * 2 * BLOCK + tid;
    float v = 0.0f;
    if (i < N) v = x[i];
    if (i + BLOCK < N) v += x[i + BLOCK];
    sdata[tid] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, sdata[0]);
}
