// Timing test kernel (the fast one of a pair): out[i] = a[i] + b[i], memory-bound (about 0.05-0.1 ms
// at the timing size on an H100/H200). pair_slow.cu computes the same with the same signature.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
    }
}
