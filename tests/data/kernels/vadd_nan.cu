// Test kernel: vector add that writes NaN at index 5 (where the reference has a finite value)
// and the correct sum everywhere else.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = (i == 5) ? __int_as_float(0x7fc00000) : a[i] + b[i];   // quiet NaN
    }
}
