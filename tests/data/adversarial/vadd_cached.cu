// Adversarial kernel: a result cached from an earlier launch. The first launch of the loaded
// module computes a + b and also stores it in a __device__ buffer; every later launch copies
// that stored buffer into out for the elements it covers, whatever its inputs (a "memoizing"
// kernel that forgot to key its cache on the inputs). The worker loads the candidate's module
// once and launches it for every verification case with fresh inputs, so the second case
// (same N, a new seed) must fail with values outside tolerance (wrong_output).
#define BLOCK 256
#define CAP (1 << 20)                  // elements the cache holds (the largest N of the spec)

__device__ float cache[CAP];
__device__ int cached_n;               // elements held by the cache; 0 before the first launch ends
__device__ unsigned int blocks_done;   // blocks of the current launch that have finished

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    __shared__ int have;
    if (threadIdx.x == 0) {
        have = *(volatile int*)&cached_n;
    }
    __syncthreads();
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        if (i < have) {
            out[i] = cache[i];                         // replay the first launch's answer
        } else {
            float v = a[i] + b[i];
            out[i] = v;
            if (have == 0 && i < CAP) {
                cache[i] = v;
            }
        }
    }
    // the last block of the first launch publishes the cache (every block read cached_n before
    // counting itself, so no block of this launch sees it change)
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) + 1u == gridDim.x) {
            blocks_done = 0;
            if (have == 0) {
                cached_n = N < CAP ? N : CAP;
                __threadfence();
            }
        }
    }
}
