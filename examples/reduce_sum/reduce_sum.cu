// Sum of N float32 values: out[0] += x[0] + x[1] + ... + x[N-1]. Any N.
//
// Each block of BLOCK threads (a power of two) loads BLOCK elements, one per thread, into
// shared memory, reduces them with a tree, and thread 0 atomically adds the block's partial
// sum to out[0]. out is an "inout" argument that the spec initialises to 0 before every
// launch (an "output" would be poisoned with NaN, and this kernel only adds to it).
//
// Deliberately slow:
//  - the tree uses interleaved addressing, `if (tid % (2 * s) == 0)`: the active threads are
//    scattered over all warps, so every step keeps every warp busy (divergent), the modulo is
//    costly, and the strided shared-memory accesses conflict in banks;
//  - each thread loads a single element, so there are N / BLOCK blocks, each doing a full
//    shared-memory reduction with a __syncthreads() per step for only BLOCK loads;
//  - N / BLOCK atomics all land on the same address.
//
// Expected fix: a grid-stride loop so that each thread sums many elements in registers
// (vectorised float4 loads), warp-shuffle reductions, and one atomic per block from a grid
// of a few blocks per SM.
#define BLOCK 256

__global__ void reduce_sum(const float* x, float* out, int N) {
    __shared__ float sdata[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * BLOCK + tid;

    sdata[tid] = (i < N) ? x[i] : 0.0f;
    __syncthreads();

    for (int s = 1; s < BLOCK; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }

    if (tid == 0) {
        atomicAdd(out, sdata[0]);
    }
}
