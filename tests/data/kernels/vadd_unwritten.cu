// Test kernel: vector add that writes only the even indices; the odd ones keep the poison
// pattern (unwritten elements).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N && i % 2 == 0) {
        out[i] = a[i] + b[i];
    }
}
