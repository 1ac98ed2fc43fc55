// Adversarial kernel: correct while it is verified, idle while it is timed. It counts its own
// launches in a __device__ global (per loaded module) and after HONEST launches does no work at
// all, so its outputs keep whatever they held. The worker verifies 7 cases (2 sizes x 3 trials
// + the timing size) in one module, then loads the module again for timing, whose warm-up
// spends the next HONEST launches; every timed launch is then the idle one. It must be rejected
// (wrong_output): the worker poisons the outputs before every timed launch and checks what the
// timed launches wrote against the reference.
#define BLOCK 256
#define HONEST 16

__device__ unsigned int launches;      // completed launches of this module
__device__ unsigned int blocks_done;   // blocks of the current launch that have finished

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    __shared__ unsigned int seen;
    if (threadIdx.x == 0) {
        seen = *(volatile unsigned int*)&launches;
    }
    __syncthreads();
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (seen < HONEST && i < N) {
        out[i] = a[i] + b[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(&blocks_done, 1u) + 1u == gridDim.x) {
            blocks_done = 0;
            atomicAdd(&launches, 1u);
        }
    }
}
