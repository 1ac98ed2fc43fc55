// Test kernel: vector add with the correct output that also overwrites its input a with
// zeros (a is declared non-const so that this compiles); verification must report that an
// input argument changed.
#define BLOCK 256

__global__ void vadd(float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
        a[i] = 0.0f;
    }
}
