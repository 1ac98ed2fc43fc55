// Test kernel: vector add that never finishes. Every thread spins until its input exceeds
// 1e30, which the normal(0, 1) inputs never do; the read is volatile, so the compiler must
// re-load it on every iteration and cannot remove the loop. The harness must time it out.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        const volatile float* va = a;
        while (true) {
            if (va[i] > 1e30f) {
                break;
            }
        }
        out[i] = a[i] + b[i];
    }
}
