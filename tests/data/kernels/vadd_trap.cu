// Test kernel: vector add whose thread 0 executes __trap(): the launch aborts with an
// unspecified launch failure / illegal instruction and the context is unusable afterwards.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i == 0) {
        __trap();
    }
    if (i < N) {
        out[i] = a[i] + b[i];
    }
}
