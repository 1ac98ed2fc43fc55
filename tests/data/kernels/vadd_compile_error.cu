// Test kernel: vector add with a type error in the body (a float assigned to a float*), so
// nvcc rejects it. The signature is intact, so the spec still loads against this source.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        float* sum = a[i] + b[i];
        out[i] = *sum;
    }
}
