// Adversarial kernel: right outputs, but thread N writes out[N], one element past the end. The
// allocation's rounding slack absorbs it (no fault, nothing else overwritten), so verification
// passes; compute-sanitizer's memcheck sees the write (status unsafe).
#define BLOCK 256

__global__ void vadd(const float* a, const float* b, float* out, int N) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < N) {
        out[i] = a[i] + b[i];
    } else if (i == N) {
        out[i] = 0.0f;                  // one past the end
    }
}
