// Test kernel: vector add with an off-by-one bound (i < N - 1): the last element is never
// written, so it keeps the poison pattern and verification reports it unwritten.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N - 1) {
        out[i] = a[i] + b[i];
    }
}
