// Test kernel: vector add that is correct for the full blocks (i < (N / BLOCK) * BLOCK) but
// writes a[i] - b[i] in the last, partial block: a value mismatch that only shows at sizes
// that are not a multiple of BLOCK (the timing size 1 << 20 passes; 1000 and 4097 fail).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        if (i < (N / BLOCK) * BLOCK) {
            out[i] = a[i] + b[i];
        } else {
            out[i] = a[i] - b[i];
        }
    }
}
