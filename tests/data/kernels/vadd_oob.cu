// Test kernel: vector add that stores far out of bounds (2^36 floats = 256 GiB past out),
// an address no allocation covers: the launch faults with an illegal memory access.
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[(long long)i + (1LL << 36)] = a[i] + b[i];
    }
}
