// Strategy: fewer, fuller blocks: each thread adds about ITEMS elements in a grid-stride loop,
// the warps reduce with shuffles, the block's warp sums meet in shared memory; one atomic per block.
#define BLOCK 256
#define ITEMS 16
// optiml:launch {grid = ["cdiv(N, BLOCK * ITEMS)"], block = ["BLOCK"], shared_mem = 0}

__global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, int N) {
    __shared__ float warp_sums[BLOCK / 32];
    float s = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < N; i += gridDim.x * BLOCK) s += x[i];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < BLOCK / 32 ? warp_sums[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) atomicAdd(out, s);
    }
}
