// Strategy: one thread per chunk (deliberately simple): a single-thread block adds its BLOCK
// elements one after another and adds the chunk's sum to out[0] with one atomic.
#define BLOCK 256
// optiml:launch {grid = ["cdiv(N, BLOCK)"], block = [1], shared_mem = 0}

__global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, int N) {
    int start = blockIdx.x * BLOCK;
    int end = min(start + BLOCK, N);
    float s = 0.0f;
    for (int i = start; i < end; ++i) s += x[i];
    atomicAdd(out, s);
}
