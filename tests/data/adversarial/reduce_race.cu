// Adversarial kernel: reduce_ok.cu with its __syncthreads() removed, a race on shared memory.
// A thread reads partial[t + stride] whether or not the warp that owns it has stored it yet
// (or, since nothing orders them, the compiler may keep each thread's own partial[t] in a
// register and store it late), so the sums of some blocks pick up stale values, and which
// blocks varies from run to run. With thousands of blocks per case it must fail
// verification (wrong_output); the spec is reduce_ok's, which verifies.
#define BLOCK 256
#define ITEMS 4

__global__ void block_sum(const float* x, float* out, int N) {
    __shared__ float partial[BLOCK];
    int t = threadIdx.x;
    long long base = (long long)blockIdx.x * BLOCK * ITEMS;
    float v = 0.0f;
    for (int k = 0; k < ITEMS; ++k) {
        long long i = base + (long long)k * BLOCK + t;
        if (i < N) {
            v += x[i];
        }
    }
    partial[t] = v;
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) {
            partial[t] += partial[t + stride];
        }
    }
    if (t == 0) {
        out[blockIdx.x] = partial[0];
    }
}
